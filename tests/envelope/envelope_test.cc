// Envelope cache tests: the fast writers against the reference renderer, byte for byte, and the
// zero-allocation property of the steady state.
#include "tollgate/envelope/envelope.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "support/alloc_counter.h"
#include "tollgate/common/json_out.h"
#include "tollgate/envelope/reference.h"

namespace tollgate::envelope {
namespace {

const cache& the_cache() {
  static const cache c(server_identity{});
  return c;
}

std::string random_text(std::mt19937& rng, size_t max_len) {
  std::uniform_int_distribution<size_t> len(0, max_len);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(len(rng), '\0');
  for (auto& ch : s) {
    int b = byte(rng);
    // Mostly printable, with quotes, backslashes, control bytes and high bytes mixed in.
    if (b < 180) {
      ch = static_cast<char>(' ' + b % 95);
    } else if (b < 200) {
      ch = '"';
    } else if (b < 215) {
      ch = '\\';
    } else {
      ch = static_cast<char>(b - 215);  // control characters 0..40
    }
  }
  return s;
}

// Writes a random payload twice: through json_out(nested) into `nested` and raw into `raw`.
void random_payload(std::mt19937& rng, out_buffer& nested, out_buffer& raw) {
  json_out n(nested, true);
  json_out r(raw, false);
  std::uniform_int_distribution<int> op(0, 3);
  int items = static_cast<int>(rng() % 20);
  n.raw("{\"items\":[");
  r.raw("{\"items\":[");
  for (int i = 0; i < items; ++i) {
    if (i) {
      n.raw(",");
      r.raw(",");
    }
    switch (op(rng)) {
      case 0: {
        std::string s = random_text(rng, 40);
        n.string(s);
        r.string(s);
        break;
      }
      case 1: {
        int64_t v = static_cast<int64_t>(rng()) - (1LL << 31);
        n.number(v);
        r.number(v);
        break;
      }
      case 2:
        n.boolean(i % 2);
        r.boolean(i % 2);
        break;
      default:
        n.raw("null");
        r.raw("null");
        break;
    }
  }
  n.raw("]}");
  r.raw("]}");
}

std::string random_id(std::mt19937& rng) {
  switch (rng() % 3) {
    case 0:
      return std::to_string(rng() % 100000);
    case 1:
      return "\"" + reference::escape(random_text(rng, 12)) + "\"";
    default:
      return "null";
  }
}

tool_error random_tool_error(std::mt19937& rng) {
  tool_error e;
  e.code = static_cast<tool_error_code>(rng() % num_tool_error_codes);
  auto fig = [&]() -> int64_t {
    return rng() % 3 == 0 ? -1 : static_cast<int64_t>(rng() % 5000000);
  };
  e.retry_after_secs = fig();
  e.quota_limit = fig();
  e.quota_used = fig();
  e.quota_remaining = fig();
  return e;
}

TEST(envelope_test, success_matches_reference_for_random_payloads) {
  // Verifies the fast success envelope (prefix + nested payload + suffix) equals the reference
  // rendering of the raw payload escaped once, for every revision.
  std::mt19937 rng(1);
  for (int i = 0; i < 2000; ++i) {
    out_buffer fast;
    out_buffer raw;
    std::string id = random_id(rng);
    auto rev = static_cast<revision>(i % num_revisions);
    the_cache().success_prefix(fast, id, rev);
    random_payload(rng, fast, raw);
    the_cache().success_suffix(fast);
    ASSERT_EQ(fast.view(), reference::success(id, rev, raw.view())) << "case " << i;
  }
}

TEST(envelope_test, tool_errors_match_reference) {
  // Verifies every tool-error envelope, with every combination of present figures, equals the
  // reference rendering (text = the compact error JSON escaped once).
  std::mt19937 rng(2);
  for (int i = 0; i < 2000; ++i) {
    tool_error e = random_tool_error(rng);
    std::string id = random_id(rng);
    auto rev = static_cast<revision>(i % num_revisions);
    out_buffer fast;
    the_cache().tool_error_response(fast, id, rev, e);
    ASSERT_EQ(fast.view(), reference::tool_error_response(id, rev, e));
    out_buffer json;
    the_cache().tool_error_json(json, e);
    ASSERT_EQ(json.view(), reference::tool_error_json(e));
  }
}

TEST(envelope_test, seed_quota_exceeded_shape) {
  // Verifies the quota_exceeded tool error has exactly the seed's shape and figure order.
  tool_error e{tool_error_code::quota_exceeded, 394200, 1000, 1000, 0, {}};
  out_buffer out;
  the_cache().tool_error_response(out, "3", revision::v2025_06_18, e);
  std::string expect =
      R"({"jsonrpc":"2.0","id":3,"result":{"isError":true,"content":[{"type":"text","text":"{\"code\":\"quota_exceeded\",\"message\":\")" +
      std::string(message_of(tool_error_code::quota_exceeded)) +
      R"(\",\"retry_after_secs\":394200,\"quota_limit\":1000,\"quota_used\":1000,\"quota_remaining\":0}"}]}})";
  EXPECT_EQ(out.view(), expect);
}

TEST(envelope_test, the_three_unavailable_codes_share_a_name_and_differ_in_message) {
  // Verifies the usage journal's and the cluster quota service's outages are written with the
  // code `unavailable` (what clients branch on), each with its own message, and that every
  // code has a name and a message.
  EXPECT_EQ(name_of(tool_error_code::usage_unavailable), "unavailable");
  EXPECT_EQ(name_of(tool_error_code::quota_unreachable), "unavailable");
  const std::string_view shard = message_of(tool_error_code::unavailable);
  const std::string_view journal = message_of(tool_error_code::usage_unavailable);
  const std::string_view redis = message_of(tool_error_code::quota_unreachable);
  EXPECT_NE(shard, journal);
  EXPECT_NE(shard, redis);
  EXPECT_NE(journal, redis);
  EXPECT_NE(journal.find("usage journal"), std::string_view::npos);
  EXPECT_NE(redis.find("quota service cannot be reached"), std::string_view::npos);
  for (size_t c = 0; c < num_tool_error_codes; ++c) {
    EXPECT_FALSE(name_of(static_cast<tool_error_code>(c)).empty()) << c;
    EXPECT_FALSE(message_of(static_cast<tool_error_code>(c)).empty()) << c;
  }
}

TEST(envelope_test, a_tool_error_with_its_own_message_matches_reference) {
  // Verifies a tool error given a message of its own (the stdio bridge's causes) says that
  // message instead of its code's, with any text (quotes, backslashes, control bytes, UTF-8),
  // escaped once in the JSON object and once more in the text block, as the reference renders
  // it, on every revision; and tool_error_json (REST's form) says it too.
  std::mt19937 rng(29);
  for (int i = 0; i < 2000; ++i) {
    tool_error e;
    e.code = static_cast<tool_error_code>(rng() % num_tool_error_codes);
    e.retry_after_secs = rng() % 2 ? -1 : static_cast<int64_t>(rng() % 100);
    const std::string message = random_text(rng, 60) + "\" \\ \n";
    e.message = message;
    const auto r = static_cast<revision>(rng() % num_revisions);
    const std::string id = random_id(rng);
    out_buffer fast;
    the_cache().tool_error_response(fast, id, r, e);
    ASSERT_EQ(fast.view(), reference::tool_error_response(id, r, e)) << i;
    out_buffer json;
    the_cache().tool_error_json(json, e);
    ASSERT_EQ(json.view(), reference::tool_error_json(e)) << i;
  }
}

TEST(envelope_test, rpc_errors_match_reference) {
  // Verifies every JSON-RPC error kind, with random details, equals the reference rendering.
  std::mt19937 rng(3);
  for (int i = 0; i < 3000; ++i) {
    rpc_error e;
    e.kind = static_cast<rpc_error_kind>(i % num_rpc_error_kinds);
    std::string detail = rng() % 4 == 0 ? std::string() : random_text(rng, 30);
    std::string rule = random_text(rng, 30);
    e.detail = detail;
    e.rule = rule;
    e.retry_after_secs = static_cast<int64_t>(rng() % 100000) + 1;
    std::string id = random_id(rng);
    out_buffer fast;
    the_cache().error_response(fast, id, e);
    ASSERT_EQ(fast.view(), reference::error_response(id, e))
        << "kind " << (i % num_rpc_error_kinds);
  }
}

TEST(envelope_test, http_framing_matches_reference) {
  // Verifies head + extra headers + Content-Length patch equals the reference HTTP rendering for
  // every status and body sizes around each Content-Length digit boundary.
  std::mt19937 rng(4);
  const int statuses[] = {200, 400, 401, 403, 404, 405, 406, 413, 415, 429, 500, 503, 418};
  const size_t sizes[] = {0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 100000};
  for (int status : statuses) {
    for (size_t size : sizes) {
      for (bool close : {false, true}) {
        std::string body(size, 'x');
        std::string extra = rng() % 2 ? "X-RateLimit-Limit: 10\r\nX-Quota-Used: 5\r\n" : "";
        out_buffer fast;
        fast.append("PREVIOUS RESPONSE");  // writers append; earlier bytes stay untouched
        the_cache().head(fast, status, close);
        fast.append(extra);
        body_mark m = the_cache().body_start(fast);
        fast.append(body);
        the_cache().body_end(fast, m);
        ASSERT_EQ(fast.view(), "PREVIOUS RESPONSE" + reference::http(status, close, extra, body))
            << status << " " << size;
      }
    }
  }
}

TEST(envelope_test, content_length_field_is_right_aligned_and_widens_past_seven_digits) {
  // Verifies the length is written right-aligned after OWS (the body is not moved) up to seven
  // digits, and that an eight-digit length widens the field, moving the body intact.
  for (size_t size : {size_t{9'999'999}, size_t{10'000'000}}) {
    std::string body(size, 'x');
    body.front() = '{';
    body.back() = '}';
    out_buffer fast;
    the_cache().head(fast, 200, false);
    body_mark m = the_cache().body_start(fast);
    fast.append(body);
    the_cache().body_end(fast, m);
    const std::string_view v = fast.view();
    const std::string want = size == 9'999'999 ? "\r\nContent-Length: 9999999\r\n\r\n{"
                                               : "\r\nContent-Length: 10000000\r\n\r\n{";
    EXPECT_NE(v.find(want), std::string_view::npos) << size;
    EXPECT_EQ(v.substr(v.size() - size), body) << size;
    EXPECT_EQ(v, reference::http(200, false, "", body)) << size;
  }
}

TEST(envelope_test, empty_response_matches_reference) {
  // Verifies bodiless responses (202, 204) carry no Content-Type, a 202 says Content-Length 0,
  // and a 204 has no Content-Length at all (RFC 9110 §8.6: a server must not send one).
  for (int status : {202, 204}) {
    for (bool close : {false, true}) {
      out_buffer out;
      the_cache().empty_response(out, status, "X-A: 1\r\n", close);
      EXPECT_EQ(out.view(), reference::http(status, close, "X-A: 1\r\n", ""));
      EXPECT_EQ(out.view().find("Content-Type"), std::string_view::npos);
      EXPECT_TRUE(out.view().ends_with(
          "X-A: 1\r\n" + std::string(status == 202 ? "Content-Length: 0\r\n" : "") + "\r\n"))
          << out.view();
    }
  }
  out_buffer no_content;
  the_cache().empty_response(no_content, 204, "", false);
  EXPECT_EQ(no_content.view(), "HTTP/1.1 204 No Content\r\n\r\n");
}

TEST(envelope_test, unauthorized_never_advertises_oauth) {
  // Verifies the 401 carries the Bearer realm challenge, the invalid_key body, and no
  // resource_metadata, and equals the reference.
  for (bool close : {false, true}) {
    out_buffer out;
    the_cache().unauthorized(out, close);
    EXPECT_EQ(out.view(), reference::unauthorized(close));
    EXPECT_NE(out.view().find("WWW-Authenticate: Bearer realm=\"tollgate\"\r\n"),
              std::string_view::npos);
    EXPECT_NE(out.view().find(R"({"code":"invalid_key","message":")"), std::string_view::npos);
    EXPECT_EQ(out.view().find("resource_metadata"), std::string_view::npos);
  }
}

TEST(envelope_test, unauthorized_with_oauth_names_the_resource_metadata) {
  // Verifies the OAuth form of the challenge (RFC 9728 §5.1): resource_metadata after the realm,
  // then error="invalid_token" only when a credential was presented; the body is the key-only
  // server's.
  const std::string_view url = "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp";
  out_buffer out;
  the_cache().unauthorized(out, false, false, url);
  EXPECT_NE(
      out.view().find("\r\nWWW-Authenticate: Bearer realm=\"tollgate\", resource_metadata=\"" +
                      std::string(url) + "\"\r\n"),
      std::string_view::npos)
      << out.view();
  EXPECT_NE(out.view().find(R"({"code":"invalid_key","message":")"), std::string_view::npos);
  out.clear();
  the_cache().unauthorized(out, false, true, url);
  EXPECT_NE(out.view().find("resource_metadata=\"" + std::string(url) +
                            "\", error=\"invalid_token\", error_description=\""),
            std::string_view::npos)
      << out.view();
}

TEST(envelope_test, unauthorized_names_an_invalid_token_only_when_a_key_was_presented) {
  // Verifies RFC 6750 §3.1: a presented key that is not valid adds error="invalid_token" and an
  // error_description to the Bearer challenge; no key, no error code; never resource_metadata.
  out_buffer out;
  the_cache().unauthorized(out, false, true);
  EXPECT_EQ(out.view(), reference::unauthorized(false, true));
  EXPECT_NE(out.view().find("\r\nWWW-Authenticate: Bearer realm=\"tollgate\", "
                            "error=\"invalid_token\", error_description=\""),
            std::string_view::npos)
      << out.view();
  EXPECT_EQ(out.view().find("resource_metadata"), std::string_view::npos);
  out.clear();
  the_cache().unauthorized(out, false, false);
  EXPECT_EQ(out.view().find("error="), std::string_view::npos);
}

TEST(envelope_test, result_and_prerendered_results) {
  // Verifies result_response, the initialize results per revision and the discover result.
  out_buffer out;
  the_cache().result_response(out, "\"a\"", the_cache().empty_result(revision::v2026_07_28));
  EXPECT_EQ(out.view(), R"({"jsonrpc":"2.0","id":"a","result":{"resultType":"complete"}})");
  EXPECT_EQ(out.view(), reference::result_response("\"a\"", R"({"resultType":"complete"})"));
  EXPECT_NE(the_cache()
                .initialize_result(revision::v2025_06_18)
                .find(R"("protocolVersion":"2025-06-18")"),
            std::string_view::npos);
  std::string_view d = the_cache().discover_result();
  EXPECT_EQ(d.substr(0, 25), std::string_view(R"({"resultType":"complete",)"));
  for (auto field :
       {"\"supportedVersions\":[\"2025-03-26\",\"2025-06-18\",\"2025-11-25\",\"2026-07-28\"]",
        "\"capabilities\":", "\"serverInfo\":", "\"ttlMs\":", "\"cacheScope\":"}) {
    EXPECT_NE(d.find(field), std::string_view::npos) << field;
  }
}

TEST(envelope_test, steady_state_allocates_nothing) {
  // Verifies that after warm-up, writing a full success and a full tool-error response into a
  // reused buffer makes no allocation.
  out_buffer out(64 * 1024);
  std::string payload(2048, 'p');
  auto once = [&] {
    out.clear();
    the_cache().head(out, 200, false);
    body_mark m = the_cache().body_start(out);
    the_cache().success_prefix(out, "12", revision::v2025_11_25);
    json_out j(out, true);
    j.string(payload);
    the_cache().success_suffix(out);
    the_cache().body_end(out, m);
    the_cache().tool_error_response(out, "12", revision::v2026_07_28,
                                    tool_error{tool_error_code::quota_exceeded, 5, 6, 7, 0, {}});
    the_cache().error_response(out, "12",
                               rpc_error{rpc_error_kind::invalid_params, "limit", "x", 1});
  };
  once();
  test::alloc_scope scope;
  for (int i = 0; i < 100; ++i) {
    once();
  }
  EXPECT_EQ(scope.count(), 0u);
}

TEST(envelope_test, parse_revision_knows_exactly_the_four) {
  // Verifies revision names round-trip and unknown names are refused.
  for (size_t i = 0; i < num_revisions; ++i) {
    revision r{};
    ASSERT_TRUE(parse_revision(revision_names[i], r));
    EXPECT_EQ(static_cast<size_t>(r), i);
  }
  revision r{};
  EXPECT_FALSE(parse_revision("2024-11-05", r));
  EXPECT_FALSE(parse_revision("", r));
}

}  // namespace
}  // namespace tollgate::envelope
