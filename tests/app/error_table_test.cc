// The error model's table (design §2) walked through one real core_handler, MCP and REST: every
// answer is well framed, carries no header twice, and has a valid JSON body where it has one.
// Plus what real MCP clients tripped over: the 429's Retry-After and message, notifications and
// the rate limit, and the 401's RFC 6750 challenge.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <strings.h>

#include <map>
#include <string>
#include <vector>

#include "app/handler_world.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"

namespace tollgate::app {
namespace {

using test::handler_world;

constexpr int64_t kMs = 1000000;

std::string mcp(std::string_view key, std::string_view body,
                std::string_view extra_headers = "MCP-Protocol-Version: 2025-06-18\r\n") {
  std::string r = "POST /mcp HTTP/1.1\r\nHost: t\r\n";
  if (!key.empty()) {
    r += "Authorization: Bearer " + std::string(key) + "\r\n";
  }
  r += "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n";
  r += extra_headers;
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
  return r;
}

std::string call(std::string_view tool, std::string_view args, int id = 1) {
  return R"({"jsonrpc":"2.0","id":)" + std::to_string(id) +
         R"(,"method":"tools/call","params":{"name":")" + std::string(tool) + R"(","arguments":)" +
         std::string(args) + "}}";
}

std::string rest(std::string_view key, std::string_view target) {
  std::string r = "GET " + std::string(target) + " HTTP/1.1\r\nHost: t\r\n";
  if (!key.empty()) {
    r += "X-API-Key: " + std::string(key) + "\r\n";
  }
  return r + "\r\n";
}

struct reply {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string body;
  std::string raw;
  std::string header(std::string_view lower_name) const {
    for (const auto& [n, v] : headers) {
      if (n == lower_name) {
        return v;
      }
    }
    return "";
  }
  int count(std::string_view lower_name) const {
    int n = 0;
    for (const auto& h : headers) {
      n += h.first == lower_name;
    }
    return n;
  }
};

reply split(const std::string& raw) {
  reply r;
  r.raw = raw;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || end == std::string::npos) {
    return r;
  }
  r.status = std::stoi(raw.substr(9, 3));
  size_t at = raw.find("\r\n") + 2;
  while (at < end + 2) {
    const size_t eol = raw.find("\r\n", at);
    const std::string line = raw.substr(at, eol - at);
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    r.headers.emplace_back(name, value);
    at = eol + 2;
  }
  r.body = raw.substr(end + 4);
  return r;
}

// Every response: a status line, no header twice, a Content-Length equal to the body's size,
// and a body that is valid JSON when it is declared JSON.
void check_well_formed(const reply& r, const std::string& what) {
  ASSERT_GT(r.status, 0) << what << ": " << r.raw;
  std::map<std::string, int> seen;
  for (const auto& h : r.headers) {
    EXPECT_EQ(++seen[h.first], 1) << what << ": header " << h.first << " twice:\n" << r.raw;
  }
  if (std::string_view(what).rfind("HEAD", 0) == 0) {
    EXPECT_EQ(r.body, "") << what << ": a HEAD answer has no body";
    return;
  }
  if (r.status != 204 && r.status != 304) {
    EXPECT_EQ(r.header("content-length"), std::to_string(r.body.size())) << what;
  }
  if (r.header("content-type").rfind("application/json", 0) == 0) {
    static simdjson::dom::parser p;
    simdjson::dom::element e;
    EXPECT_EQ(p.parse(r.body).get(e), simdjson::SUCCESS) << what << ": " << r.body;
  }
}

class error_table_test : public ::testing::Test {
 protected:
  handler_world w;
  int64_t now = w.start_ns();
  reply ask(const std::string& raw, const std::string& what) {
    now += kMs;
    reply r = split(w.respond(raw, now));
    check_well_formed(r, what);
    return r;
  }
  void SetUp() override { ASSERT_TRUE(w.ok()); }
};

// Over 80 lines on purpose: one flat table of every error-table row, then the limit rows.
TEST_F(error_table_test, no_answer_of_any_kind_carries_a_header_twice) {
  // Verifies every row of the error table, on MCP and REST (and the transport's own refusals),
  // is answered with each header at most once, exact framing and valid JSON.
  const std::string& k = w.roomy();
  const struct {
    const char* what;
    std::string raw;
    int status;
  } cases[] = {
      {"mcp no key", mcp("", call("get_usage", "{}")), 401},
      {"mcp bad key", mcp("tg_wrong", call("get_usage", "{}")), 401},
      {"mcp initialize",
       mcp(k,
           R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})"),
       200},
      {"mcp notification", mcp(k, R"({"jsonrpc":"2.0","method":"notifications/initialized"})"),
       202},
      {"mcp response", mcp(k, R"({"jsonrpc":"2.0","id":4,"result":{}})"), 202},
      {"mcp tools/list", mcp(k, R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})"), 200},
      {"mcp unknown method", mcp(k, R"({"jsonrpc":"2.0","id":1,"method":"nope"})"), 200},
      {"mcp unknown tool", mcp(k, call("nope", "{}")), 200},
      {"mcp bad argument", mcp(k, call("search_stories", R"({"query":"rust","limit":500})")), 200},
      {"mcp parse error", mcp(k, "{oops"), 400},
      {"mcp invalid request", mcp(k, R"({"jsonrpc":"1.0","id":1,"method":"ping"})"), 400},
      {"mcp success", mcp(k, call("search_stories", R"({"query":"rust","limit":2})")), 200},
      {"mcp not found", mcp(k, call("get_story", R"({"id":"no-such-story"})")), 200},
      {"mcp get_usage", mcp(k, call("get_usage", "{}")), 200},
      {"mcp suspended", mcp(w.suspended(), call("search_stories", R"({"query":"rust"})")), 200},
      {"mcp batch",
       mcp(k,
           R"([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}])",
           ""),
       200},
      {"mcp bad version",
       mcp(k, R"({"jsonrpc":"2.0","id":1,"method":"ping"})",
           "MCP-Protocol-Version: 1999-01-01\r\n"),
       400},
      {"mcp header mismatch",
       mcp(k, R"({"jsonrpc":"2.0","id":1,"method":"ping"})",
           "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n"),
       400},
      {"mcp bad origin",
       mcp(k, R"({"jsonrpc":"2.0","id":1,"method":"ping"})", "Origin: https://evil.example\r\n"),
       403},
      {"mcp bad accept",
       "POST /mcp HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + k +
           "\r\nAccept: text/html\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
       406},
      {"mcp bad content type",
       "POST /mcp HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + k +
           "\r\nAccept: */*\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}",
       415},
      {"mcp GET", "GET /mcp HTTP/1.1\r\nHost: t\r\n\r\n", 405},
      {"mcp PUT", "PUT /mcp HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", 405},
      {"rest no key", rest("", "/v1/usage"), 401},
      {"rest bad key", rest("tg_wrong", "/v1/usage"), 401},
      {"rest usage", rest(k, "/v1/usage"), 200},
      {"rest search", rest(k, "/v1/stories?q=rust&limit=2"), 200},
      {"rest bad argument", rest(k, "/v1/stories?q=rust&limit=500"), 400},
      {"rest not UTF-8", rest(k, "/v1/stories?q=%FF"), 400},
      {"rest story not found", rest(k, "/v1/stories/no-such-story"), 404},
      {"rest suspended", rest(w.suspended(), "/v1/stories?q=rust"), 403},
      {"no route", rest(k, "/nope"), 404},
      {"wrong method", "POST /v1/usage HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", 405},
      {"well-known", rest("", "/.well-known/oauth-protected-resource"), 404},
      {"healthz", rest("", "/healthz"), 200},
      {"metrics", rest("", "/metrics"), 200},
      {"parser error", "GET /x HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n", 400},
      {"HEAD without a key", "HEAD /v1/usage HTTP/1.1\r\nHost: t\r\n\r\n", 401},
      {"HEAD with a key", "HEAD /v1/usage HTTP/1.1\r\nHost: t\r\nX-API-Key: " + k + "\r\n\r\n",
       200},
      {"HEAD /mcp", "HEAD /mcp HTTP/1.1\r\nHost: t\r\n\r\n", 405},
  };
  for (const auto& c : cases) {
    reply r = ask(c.raw, c.what);
    EXPECT_EQ(r.status, c.status) << c.what << ": " << r.raw;
  }
  // The rows that need a key pushed to its limits: the tight key (burst 2, 3 calls a month).
  const std::string& t = w.tight();
  for (int i = 0; i < 3; ++i) {
    now += 2000 * kMs;  // a full burst again
    EXPECT_EQ(ask(mcp(t, call("search_stories", R"({"query":"rust"})")), "billed").status, 200);
  }
  now += 2000 * kMs;
  reply quota = ask(mcp(t, call("search_stories", R"({"query":"rust"})")), "mcp quota_exceeded");
  EXPECT_NE(quota.body.find("quota_exceeded"), std::string::npos) << quota.raw;
  EXPECT_EQ(ask(rest(t, "/v1/stories?q=rust"), "rest quota_exceeded").status, 429);
  // Burst spent at one instant: the next MCP and REST requests are refused with 429.
  now += 2000 * kMs;
  const int64_t at = now;
  reply limited_mcp;
  reply limited_rest;
  for (int i = 0; i < 3; ++i) {
    limited_mcp = split(w.respond(mcp(t, R"({"jsonrpc":"2.0","id":9,"method":"ping"})"), at));
    limited_rest = split(w.respond(rest(t, "/v1/usage"), at));
  }
  check_well_formed(limited_mcp, "mcp 429");
  check_well_formed(limited_rest, "rest 429");
  EXPECT_EQ(limited_mcp.status, 429) << limited_mcp.raw;
  EXPECT_EQ(limited_rest.status, 429) << limited_rest.raw;
  EXPECT_EQ(limited_mcp.count("retry-after"), 1) << limited_mcp.raw;
  EXPECT_EQ(limited_rest.count("retry-after"), 1) << limited_rest.raw;
}

TEST_F(error_table_test, mcp_429_puts_the_wait_in_its_message_and_data) {
  // Verifies the 429 on /mcp says the number of seconds in its message ("retry in N
  // second(s).", which clients show the model) and in data.retry_after_secs, equal to the one
  // Retry-After header.
  const std::string& t = w.tight();
  reply r;
  for (int i = 0; i < 3; ++i) {
    r = split(w.respond(mcp(t, R"({"jsonrpc":"2.0","id":"x","method":"ping"})"), now));
  }
  ASSERT_EQ(r.status, 429) << r.raw;
  simdjson::dom::parser p;
  simdjson::dom::element e;
  ASSERT_EQ(p.parse(r.body).get(e), simdjson::SUCCESS);
  int64_t secs = 0;
  ASSERT_EQ(e.at_pointer("/error/data/retry_after_secs").get(secs), simdjson::SUCCESS);
  EXPECT_EQ(r.header("retry-after"), std::to_string(secs));
  std::string_view message;
  ASSERT_EQ(e.at_pointer("/error/message").get(message), simdjson::SUCCESS);
  EXPECT_EQ(message, "Rate limit exceeded: retry in " + std::to_string(secs) + " second(s).");
  std::string_view id;
  ASSERT_EQ(e.at_pointer("/id").get(id), simdjson::SUCCESS);
  EXPECT_EQ(id, "x");
}

TEST_F(error_table_test, notifications_do_not_count_toward_the_rate_limit) {
  // Verifies a handshake (initialize, notifications/initialized, tools/list) fits a burst of 2
  // at one instant: the notification (202) is not charged, so both requests are answered, the
  // headers of the 202 say what is left, and the next request is the one refused. A
  // notification (or a client's response, or a batch of them) sent while limited gets 202.
  const std::string& t = w.tight();
  reply init = split(w.respond(
      mcp(t,
          R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})"),
      now));
  EXPECT_EQ(init.status, 200) << init.raw;
  EXPECT_EQ(init.header("x-ratelimit-remaining"), "1");
  reply note =
      split(w.respond(mcp(t, R"({"jsonrpc":"2.0","method":"notifications/initialized"})"), now));
  EXPECT_EQ(note.status, 202) << note.raw;
  EXPECT_EQ(note.header("x-ratelimit-remaining"), "1") << note.raw;
  reply list = split(w.respond(mcp(t, R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})"), now));
  EXPECT_EQ(list.status, 200) << list.raw;
  EXPECT_EQ(list.header("x-ratelimit-remaining"), "0");
  reply refused = split(w.respond(mcp(t, R"({"jsonrpc":"2.0","id":3,"method":"ping"})"), now));
  EXPECT_EQ(refused.status, 429) << refused.raw;
  for (const char* body :
       {R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}})",
        R"({"jsonrpc":"2.0","id":7,"result":{}})"}) {
    reply r = split(w.respond(mcp(t, body), now));
    check_well_formed(r, body);
    EXPECT_EQ(r.status, 202) << body << ": " << r.raw;
    EXPECT_EQ(r.count("retry-after"), 0) << r.raw;
  }
  reply batch = split(w.respond(
      mcp(t,
          R"([{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":8,"result":{}}])",
          ""),
      now));
  EXPECT_EQ(batch.status, 202) << batch.raw;
  // Nothing was given back that was never charged: still refused at the same instant.
  EXPECT_EQ(split(w.respond(mcp(t, R"({"jsonrpc":"2.0","id":4,"method":"ping"})"), now)).status,
            429);
}

TEST_F(error_table_test, unauthorized_challenge_names_an_invalid_token_only_when_one_was_sent) {
  // Verifies RFC 6750 on /mcp and REST: a key that was sent and is not valid gets
  // error="invalid_token" with an error_description; no key gets the bare challenge; never
  // resource_metadata.
  for (const std::string& raw :
       {mcp("tg_wrong", call("get_usage", "{}")), rest("tg_wrong", "/v1/usage")}) {
    reply r = split(w.respond(raw, now));
    ASSERT_EQ(r.status, 401) << r.raw;
    const std::string c = r.header("www-authenticate");
    EXPECT_EQ(
        c.rfind("Bearer realm=\"tollgate\", error=\"invalid_token\", error_description=\"", 0), 0u)
        << c;
    EXPECT_EQ(c.find("resource_metadata"), std::string::npos);
  }
  for (const std::string& raw : {mcp("", call("get_usage", "{}")), rest("", "/v1/usage")}) {
    reply r = split(w.respond(raw, now));
    ASSERT_EQ(r.status, 401) << r.raw;
    EXPECT_EQ(r.header("www-authenticate"), "Bearer realm=\"tollgate\"");
  }
}

TEST_F(error_table_test, invalid_utf8_from_a_client_never_breaks_a_json_body) {
  // Verifies bytes that are not UTF-8 in the MCP-Protocol-Version header reach the -32022 body
  // as U+FFFD (the body stays valid JSON and still names what was asked for).
  reply r = ask(mcp(w.roomy(), R"({"jsonrpc":"2.0","id":1,"method":"ping"})",
                    "MCP-Protocol-Version: 2025-\xff\xfe-01\r\n"),
                "bad version bytes");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find(R"("requested":"2025-\ufffd\ufffd-01")"), std::string::npos) << r.body;
}

// A shard whose story `broken` has a stored text that cannot be read (as a damaged index's
// frame that does not decompress: local_shard::text() fails with errc::unreadable).
class unreadable_text_shard final : public search::shard_source {
 public:
  unreadable_text_shard(std::unique_ptr<search::shard_source> inner, std::string broken)
      : inner_(std::move(inner)), broken_(std::move(broken)) {}
  search::shard_stats stats() const override { return inner_->stats(); }
  void finalize(const search::shard_stats& g) override { inner_->finalize(g); }
  bool add_doc_freqs(const search::query_plan& p, search::shard_workspace& ws,
                     uint64_t* df) const override {
    return inner_->add_doc_freqs(p, ws, df);
  }
  bool search(const search::query_plan& p, search::shard_workspace& ws,
              search::shard_answer& out) const override {
    return inner_->search(p, ws, out);
  }
  result<uint32_t, search::errc> find(std::string_view id) const override {
    auto r = inner_->find(id);
    if (r && id == broken_) {
      broken_doc_ = *r;
    }
    return r;
  }
  result<void, search::errc> render_story(uint32_t doc, bool with_text, json_out& out,
                                          search::pending_read* nowait) const override {
    if (with_text && doc == broken_doc_) {
      return unexpected(search::errc::unreadable);
    }
    return inner_->render_story(doc, with_text, out, nowait);
  }

 private:
  std::unique_ptr<search::shard_source> inner_;
  std::string broken_;
  mutable uint32_t broken_doc_ = UINT32_MAX;
};

TEST(error_table_surface_test, an_unreadable_story_is_a_tool_error_and_a_503_never_billed) {
  // Verifies get_story of a story whose stored text cannot be read (a damaged index) answers
  // the row "stored story unreadable" on both surfaces: MCP over HTTP 200 with a tool error
  // whose code is `unavailable`, its own message and no retry_after_secs; REST 503 with the
  // same JSON and no Retry-After; neither billed; the other stories still answered.
  std::string jsonl;
  search::generate_corpus(200, 3, [&jsonl](std::string_view c) { jsonl += c; });
  const size_t at = jsonl.find("{\"id\":\"") + 7;
  const std::string broken = jsonl.substr(at, jsonl.find('"', at) - at);
  const size_t at2 = jsonl.find("{\"id\":\"", at) + 7;
  const std::string fine = jsonl.substr(at2, jsonl.find('"', at2) - at2);
  search::load_options o;
  o.shards = 1;
  search::load_report rep;
  auto shards = search::build_shards(jsonl, o, rep);
  ASSERT_TRUE(shards.has_value());
  std::vector<std::unique_ptr<search::shard_source>> wrapped;
  wrapped.push_back(std::make_unique<unreadable_text_shard>(std::move((*shards)[0]), broken));
  handler_world w(std::make_unique<search::backend>(std::move(wrapped)));
  ASSERT_TRUE(w.ok());
  int64_t now = w.start_ns();
  auto ask = [&](const std::string& raw, const std::string& what) {
    now += kMs;
    reply r = split(w.respond(raw, now));
    check_well_formed(r, what);
    return r;
  };
  const std::string& k = w.roomy();
  const reply ok = ask(rest(k, "/v1/stories/" + fine), "REST get_story fine");
  ASSERT_EQ(ok.status, 200) << ok.raw;
  const std::string used = ok.header("x-quota-used");

  const reply m = ask(mcp(k, call("get_story", R"({"id":")" + broken + R"("})")), "MCP broken");
  ASSERT_EQ(m.status, 200) << m.raw;
  simdjson::dom::parser p;
  simdjson::dom::element e;
  ASSERT_EQ(p.parse(m.body).get(e), simdjson::SUCCESS) << m.body;
  bool is_error = false;
  ASSERT_EQ(e.at_pointer("/result/isError").get(is_error), simdjson::SUCCESS) << m.body;
  EXPECT_TRUE(is_error);
  std::string_view text;
  ASSERT_EQ(e.at_pointer("/result/content/0/text").get(text), simdjson::SUCCESS) << m.body;
  const std::string tool_error(text);
  simdjson::dom::parser p2;
  simdjson::dom::element te;
  ASSERT_EQ(p2.parse(tool_error).get(te), simdjson::SUCCESS) << tool_error;
  std::string_view code, message;
  ASSERT_EQ(te["code"].get(code), simdjson::SUCCESS);
  EXPECT_EQ(code, "unavailable");
  ASSERT_EQ(te["message"].get(message), simdjson::SUCCESS);
  EXPECT_NE(message.find("cannot be read"), std::string_view::npos) << message;
  EXPECT_EQ(tool_error.find("retry_after_secs"), std::string::npos) << tool_error;
  EXPECT_EQ(m.header("x-quota-used"), used) << "billed";

  const reply r = ask(rest(k, "/v1/stories/" + broken), "REST broken");
  EXPECT_EQ(r.status, 503) << r.raw;
  EXPECT_EQ(r.header("retry-after"), "");
  EXPECT_EQ(r.body, tool_error);
  EXPECT_EQ(r.header("x-quota-used"), used) << "billed";

  const reply again = ask(rest(k, "/v1/stories/" + fine), "REST get_story fine again");
  EXPECT_EQ(again.status, 200) << again.raw;
  EXPECT_EQ(again.header("x-quota-used"), std::to_string(std::stoll(used) + 1));
}

}  // namespace
}  // namespace tollgate::app
