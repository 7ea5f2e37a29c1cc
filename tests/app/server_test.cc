// The app's request path over real loopback sockets and a real io_uring engine: core_handler
// with the search answer cache on and off, the key cache, and what must not change with them
// (answers byte for byte, billing, rate limits, revocation, suspension).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "app/handler.h"
#include "app/observability.h"
#include "app/tools.h"
#include "net/net_test_util.h"
#include "quota/test_util.h"
#include "support/page_cache.h"
#include "tollgate/config/config.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/index_file.h"

namespace tollgate::app {
namespace {

using net::testing::client;
using net::testing::response;

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One tollgate core (the serve wiring, without the CLI) on a free loopback port.
class app_server {
 public:
  // `plan`: the key's plan (rate per second, burst, monthly quota; stop at the quota).
  // `tweak` edits the settings before anything is built (the access log, public_metrics...).
  // `load`: the corpus (the embedded sample, 4 shards, when empty).
  app_server(uint32_t cache_entries, double rate, int64_t burst, int64_t quota,
             const std::function<void(config::settings&)>& tweak = {},
             const std::function<std::unique_ptr<search::backend>()>& load = {}) {
    settings_ = config::defaults();
    settings_.data_dir = dir_.path();
    settings_.search_cache_entries = cache_entries;
    if (tweak) {
      tweak(settings_);
    }
    st_.settings = &settings_;
    quota::plan_map plans;
    plans["t"] = quota::test::make_plan("t", rate, burst, quota, quota::overage_policy::stop);
    quota::key_store store(dir_.path());
    auto k = store.create_key("acme", "t", plans, wall_ns() / 1000000000);
    EXPECT_TRUE(k.has_value());
    key_ = k ? k->secret : "";
    key_id_ = k ? k->key_id : "";
    quota::service_options qo;
    qo.data_dir = dir_.path();
    qo.plans = plans;
    qo.cores = 1;
    qo.reload_ms = 100;
    auto q = quota::service::open(std::move(qo), wall_ns());
    EXPECT_TRUE(q.has_value());
    if (q) {
      st_.quota = std::move(*q);
    }
    st_.backend = load ? load() : search::load_sample(4);
    st_.envelopes = std::make_unique<envelope::cache>(envelope::server_identity{});
    register_tools(st_.tools);
    st_.counters = std::make_unique<request_counters>(1);
    st_.cores = 1;
    if (cache_entries > 0) {
      st_.search_cache = std::make_unique<search_cache_stats[]>(1);
    }
    EXPECT_EQ(setup_observability(st_, settings_, 1), 0);
    register_routes(st_);
    srv_ = std::make_unique<net::server>(net::testing::test_options());
    st_.engine = srv_.get();
    auto r = srv_->start([this](int core) { return std::make_unique<core_handler>(st_, core); });
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error());
    started_ = r.has_value();
  }
  ~app_server() {
    if (started_) {
      srv_->stop();
      srv_->wait();
    }
  }
  bool started() const { return started_; }
  uint16_t port() const { return srv_->port(); }
  const std::string& key() const { return key_; }
  const std::string& key_id() const { return key_id_; }
  const std::string& data_dir() const { return dir_.path(); }
  const search_cache_stats* cache_stats() const { return st_.search_cache.get(); }
  quota::service& quota() { return *st_.quota; }
  shared_state& state() { return st_; }

 private:
  quota::test::temp_dir dir_;
  config::settings settings_;
  shared_state st_;
  std::unique_ptr<net::server> srv_;
  std::string key_;
  std::string key_id_;
  bool started_ = false;
};

std::string tool_request(std::string_view key, std::string_view tool, std::string_view arguments,
                         int id) {
  const std::string body = "{\"jsonrpc\":\"2.0\",\"id\":" + std::to_string(id) +
                           ",\"method\":\"tools/call\",\"params\":{\"name\":\"" +
                           std::string(tool) + "\",\"arguments\":" + std::string(arguments) + "}}";
  return "POST /mcp HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + std::string(key) +
         "\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
         "MCP-Protocol-Version: 2025-06-18\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string call_request(std::string_view key, std::string_view arguments, int id = 1) {
  return tool_request(key, "search_stories", arguments, id);
}

std::optional<response> ask(client& c, const std::string& req) {
  if (!c.send_all(req)) {
    return std::nullopt;
  }
  return c.read_response();
}

// GET `target` on a REST route with `key` (X-API-Key), on `c`'s connection.
std::optional<response> rest_get(client& c, std::string_view key, std::string_view target) {
  return ask(c, "GET " + std::string(target) +
                    " HTTP/1.1\r\nHost: t\r\nX-API-Key: " + std::string(key) + "\r\n\r\n");
}

// The value of a response header line ("Name: value\r\n"), or "".
std::string header(const response& r, std::string_view name) {
  const std::string key = "\r\n" + std::string(name) + ": ";
  const size_t at = r.head.find(key);
  if (at == std::string::npos) {
    return "";
  }
  const size_t b = at + key.size();
  return r.head.substr(b, r.head.find("\r\n", b) - b);
}

const char* const kArgumentSets[] = {
    R"({"query":"rust"})",
    R"({"query":"rust","limit":3,"offset":2})",
    R"({"query":"linux kernel scheduler"})",
    R"({"query":"\"the kernel\"","sort":"date"})",
    R"({"query":"memory","tags":["linux"],"since":"2020-01-01"})",
    R"({"query":"zzzqqq"})",
    R"({"query":"rust","limit":0})",  // invalid: an error, never cached
};

TEST(app_server_test, cached_answers_are_byte_identical_to_uncached_ones) {
  // Verifies that with the answer cache on, every response (first and repeated, valid and
  // invalid arguments) has the same body as the cache-off server's, and that repeats were
  // served from the cache.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server on(64, 1e9, 1000000000, 1000000000);
  app_server off(0, 1e9, 1000000000, 1000000000);
  ASSERT_TRUE(on.started() && off.started());
  client a(on.port());
  client b(off.port());
  ASSERT_TRUE(a.connected() && b.connected());
  for (int round = 0; round < 3; ++round) {
    for (const char* args : kArgumentSets) {
      auto ra = ask(a, call_request(on.key(), args));
      auto rb = ask(b, call_request(off.key(), args));
      ASSERT_TRUE(ra && rb) << args;
      EXPECT_EQ(ra->status, rb->status) << args;
      EXPECT_EQ(ra->body, rb->body) << args;
      EXPECT_NE(ra->body.find(args == kArgumentSets[6] ? "\"error\"" : "\"result\""),
                std::string::npos)
          << ra->body;
    }
  }
  ASSERT_NE(on.cache_stats(), nullptr);
  EXPECT_EQ(off.cache_stats(), nullptr);
  // 6 valid argument sets: each missed once and hit twice; the invalid one never got there.
  EXPECT_EQ(on.cache_stats()->misses.load(), 6u);
  EXPECT_EQ(on.cache_stats()->hits.load(), 12u);
}

TEST(app_server_test, quota_headers_count_the_call_answered_and_not_an_unbilled_one) {
  // Verifies the figures a response reports on each REST surface: a billed search says used 1,
  // remaining 2 (the call it answers counted); a story that is not found is not billed and its
  // 404 says so (still 1 and 2); /v1/usage, never billed, reports the same; the third billed
  // call's answer says 0 remaining and the call after it is refused with the same figures.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(0, 1e9, 1000000000, 3);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  auto get = [&](std::string_view target) { return rest_get(c, s.key(), target); };
  auto figures = [&](const response& r) {
    return header(r, "X-Quota-Used") + "/" + header(r, "X-Quota-Remaining");
  };
  auto r = get("/v1/stories?q=rust&limit=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(figures(*r), "1/2");
  EXPECT_NE(header(*r, "RateLimit").find("\"monthly\";r=2;"), std::string::npos)
      << header(*r, "RateLimit");
  r = get("/v1/stories/no-such-story");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(figures(*r), "1/2");
  r = get("/v1/usage");
  ASSERT_TRUE(r);
  EXPECT_EQ(figures(*r), "1/2");
  r = get("/v1/stories?q=linux&limit=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(figures(*r), "2/1");
  r = get("/v1/stories?q=the&limit=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(figures(*r), "3/0");
  r = get("/v1/stories?q=ask&limit=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(figures(*r), "3/0");
  EXPECT_NE(r->body.find("\"quota_used\":3,\"quota_remaining\":0"), std::string::npos) << r->body;
}

TEST(app_server_test, mcp_quota_headers_do_not_count_a_failed_call) {
  // Verifies over MCP what the REST test above does: a billed search_stories answer says used 1
  // (the call counted); a get_story that is not found is a tool error, not billed, and its
  // headers (written before the tool ran, then rewritten) still say 1, with a body intact to
  // its Content-Length; the next billed call says 2.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(0, 1e9, 1000000000, 3);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  auto r = ask(c, call_request(s.key(), R"({"query":"rust","limit":1})"));
  ASSERT_TRUE(r);
  EXPECT_EQ(header(*r, "X-Quota-Used"), "1");
  r = ask(c, tool_request(s.key(), "get_story", R"({"id":"no-such-story"})", 7));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("not_found"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("\"isError\":true"), std::string::npos) << r->body;
  EXPECT_EQ(r->body.back(), '}') << r->body;
  EXPECT_EQ(header(*r, "X-Quota-Used"), "1");
  EXPECT_EQ(header(*r, "X-Quota-Remaining"), "2");
  r = ask(c, call_request(s.key(), R"({"query":"linux","limit":1})"));
  ASSERT_TRUE(r);
  EXPECT_EQ(header(*r, "X-Quota-Used"), "2");
}

TEST(app_server_test, keyless_mcp_answers_carry_no_figures_and_head_has_no_body) {
  // Verifies GET /mcp (answered 405 without a key check) carries no X-RateLimit/X-Quota
  // headers, not even on a connection whose previous request was another key's call (they
  // used to echo that key's figures to anyone), and that HEAD /mcp gets the same head with no
  // body, so the response after it on the connection starts right where its head ends.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(0, 1e9, 1000000000, 1000);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  auto r = ask(c, call_request(s.key(), R"({"query":"rust","limit":1})"));
  ASSERT_TRUE(r);
  ASSERT_NE(header(*r, "X-Quota-Used"), "");
  r = ask(c, "GET /mcp HTTP/1.1\r\nHost: t\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->head.find("X-Quota"), std::string::npos) << r->head;
  EXPECT_EQ(r->head.find("RateLimit"), std::string::npos) << r->head;
  ASSERT_TRUE(
      c.send_all("HEAD /mcp HTTP/1.1\r\nHost: t\r\n\r\n"
                 "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  ASSERT_TRUE(c.wait_closed());
  const std::string raw = c.pending();
  const size_t head_end = raw.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << raw;
  EXPECT_EQ(raw.rfind("HTTP/1.1 405", 0), 0u) << raw;
  EXPECT_EQ(raw.find("X-Quota"), std::string::npos) << raw;
  EXPECT_EQ(raw.compare(head_end + 4, 15, "HTTP/1.1 200 OK"), 0) << raw;
  // Any other method gets the endpoint's own 405, with the same Allow as GET; OPTIONS (a CORS
  // preflight when it carries an allowed Origin) is 204 with the methods /mcp takes, keyless.
  client c2(s.port());
  ASSERT_TRUE(c2.connected());
  for (const char* method : {"PUT", "PATCH"}) {
    r = ask(c2, std::string(method) + " /mcp HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    ASSERT_TRUE(r) << method;
    EXPECT_EQ(r->status, 405) << method;
    EXPECT_EQ(header(*r, "Allow"), "POST") << method << ": " << r->head;
    EXPECT_EQ(r->head.find("X-Quota"), std::string::npos) << r->head;
  }
  r = ask(c2, "OPTIONS /mcp HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(header(*r, "Allow"), "POST, GET, DELETE, OPTIONS") << r->head;
  EXPECT_EQ(r->head.find("X-Quota"), std::string::npos) << r->head;
  EXPECT_EQ(r->head.find("Access-Control"), std::string::npos) << "no Origin, no CORS: " << r->head;
}

TEST(app_server_test, a_batch_costs_one_rate_unit_per_request) {
  // Verifies a 2025-03-26 batch is rated per request: with a burst of 5, a batch of 8 pings
  // answers the first 5 and gives the other 3 the JSON-RPC error 429 with their own ids (one
  // HTTP request used to cost one unit, so batches of 32 ran at 32x the plan's rate); the
  // notification in it costs nothing, and the next single request is refused with a 429.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(0, 0.001, 5, 1000);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  std::string body = "[";
  for (int i = 1; i <= 8; ++i) {
    body += fmt::format("{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}},", i);
    if (i == 2) {
      body += R"({"jsonrpc":"2.0","method":"notifications/initialized"},)";
    }
  }
  body.back() = ']';
  auto post = [&](const std::string& b) {
    return ask(c, "POST /mcp HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + s.key() +
                      "\r\nContent-Type: application/json\r\nAccept: application/json, "
                      "text/event-stream\r\nMCP-Protocol-Version: 2025-03-26\r\nContent-Length: " +
                      std::to_string(b.size()) + "\r\n\r\n" + b);
  };
  auto r = post(body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_NE(r->body.find(fmt::format("{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{}}}}", i)),
              std::string::npos)
        << i << ": " << r->body;
  }
  for (int i = 6; i <= 8; ++i) {
    EXPECT_NE(r->body.find(fmt::format("\"id\":{},\"error\":{{\"code\":429", i)), std::string::npos)
        << i << ": " << r->body;
  }
  EXPECT_EQ(header(*r, "X-RateLimit-Remaining"), "0");
  r = post(R"({"jsonrpc":"2.0","id":9,"method":"ping"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
}

TEST(app_server_test, surfaces_agree_on_time_bounds_and_story_id_length) {
  // Verifies MCP and REST refuse the same since/until values (negative, or past year 9999;
  // MCP used to take them as JSON integers) and the same story ids (longer than 64 bytes:
  // REST used to answer 404 not_found where MCP answers -32602), and accept the bounds.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(0, 1e9, 1000000000, 1000);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  auto get = [&](std::string_view target) { return rest_get(c, s.key(), target); };
  for (const char* bad : {"-5", "253402300800"}) {
    auto m = ask(c, call_request(s.key(), fmt::format(R"({{"query":"rust","since":{}}})", bad)));
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("\"code\":-32602"), std::string::npos) << bad << ": " << m->body;
    auto r = get(fmt::format("/v1/stories?q=rust&since={}", bad));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
  }
  for (const char* good : {"0", "253402300799"}) {
    auto m = ask(c, call_request(s.key(), fmt::format(R"({{"query":"rust","until":{}}})", good)));
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("\"isError\":false"), std::string::npos) << good << ": " << m->body;
    auto r = get(fmt::format("/v1/stories?q=rust&until={}", good));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << good;
  }
  const std::string long_id(65, 'a');
  auto m = ask(c, tool_request(s.key(), "get_story", R"({"id":")" + long_id + "\"}", 3));
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("\"code\":-32602"), std::string::npos) << m->body;
  auto r = get("/v1/stories/" + long_id);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("\"argument\":\"id\""), std::string::npos) << r->body;
  r = get("/v1/stories/" + std::string(64, 'a'));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);  // within the bound: simply no such story
}

TEST(app_server_test, rest_story_ids_are_percent_decoded) {
  // Verifies GET /v1/stories/ID reads ID percent-decoded (RFC 3986): a story fetched with every
  // byte of its id escaped is the same story, byte for byte (it was 404: ids holding a space,
  // '/', '?' or '%' could not be fetched at all), and a malformed escape is 400 naming id.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(0, 1e9, 1000000000, 1000);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  auto get = [&](std::string_view target) { return rest_get(c, s.key(), target); };
  auto found = get("/v1/stories?q=rust&limit=1");
  ASSERT_TRUE(found);
  const size_t at = found->body.find("\"id\":\"");
  ASSERT_NE(at, std::string::npos) << found->body;
  const std::string id = found->body.substr(at + 6, found->body.find('"', at + 6) - at - 6);
  std::string escaped;
  for (unsigned char ch : id) {
    escaped += fmt::format("%{:02X}", ch);
  }
  auto plain = get("/v1/stories/" + id);
  auto coded = get("/v1/stories/" + escaped);
  ASSERT_TRUE(plain && coded);
  EXPECT_EQ(plain->status, 200);
  EXPECT_EQ(coded->status, 200) << escaped;
  EXPECT_EQ(coded->body, plain->body);
  auto bad = get("/v1/stories/12%zz");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("\"argument\":\"id\""), std::string::npos) << bad->body;
}

TEST(app_server_test, every_cached_answer_is_billed) {
  // Verifies billing is per request with the cache: X-Quota-Used (the successes billed,
  // counting this call) grows by one on every call, hits included, the answer to the last call
  // the quota allows says 0 remaining, and the quota stops the call past it exactly as without
  // the cache.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(64, 1e9, 1000000000, 5);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  for (int i = 1; i <= 5; ++i) {
    auto r = ask(c, call_request(s.key(), R"({"query":"rust"})"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(header(*r, "X-Quota-Used"), std::to_string(i));
    EXPECT_EQ(header(*r, "X-Quota-Remaining"), std::to_string(5 - i));
    EXPECT_NE(r->body.find("\"isError\":false"), std::string::npos);
  }
  auto over = ask(c, call_request(s.key(), R"({"query":"rust"})"));
  ASSERT_TRUE(over);
  EXPECT_NE(over->body.find("quota_exceeded"), std::string::npos) << over->body;
  EXPECT_EQ(s.cache_stats()->hits.load(), 4u);
}

TEST(app_server_test, a_cached_query_is_still_rate_limited) {
  // Verifies the rate limit counts every request: with burst 3 the fourth identical call in a
  // row gets 429 even though its answer is cached.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(64, 0.001, 3, 1000000);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 3; ++i) {
    auto r = ask(c, call_request(s.key(), R"({"query":"rust"})"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  auto limited = ask(c, call_request(s.key(), R"({"query":"rust"})"));
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->status, 429);
  EXPECT_FALSE(header(*limited, "Retry-After").empty());
}

TEST(app_server_test, a_key_revoked_while_cached_gets_401_after_the_reload) {
  // Verifies the key cache does not outlive a revocation: a key used (and remembered) before
  // is answered 401 once the server has reloaded its keys (reload_ms = 100, no signal).
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(64, 1e9, 1000000000, 1000000000);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 3; ++i) {
    auto r = ask(c, call_request(s.key(), R"({"query":"rust"})"));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
  }
  quota::key_store store(s.data_dir());
  ASSERT_TRUE(store.revoke(s.key_id()).has_value());
  int status = 200;
  const auto t0 = std::chrono::steady_clock::now();
  while (status == 200 && net::testing::ms_since(t0) < 5000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto r = ask(c, call_request(s.key(), R"({"query":"rust"})"));
    ASSERT_TRUE(r);
    status = r->status;
  }
  EXPECT_EQ(status, 401);
}

TEST(app_server_test, a_suspended_account_gets_its_tool_error_with_a_cached_answer) {
  // Verifies suspension still wins over a cached answer: after the reload the same call is the
  // `suspended` tool error, not the cached stories.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(64, 1e9, 1000000000, 1000000000);
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 2; ++i) {
    auto r = ask(c, call_request(s.key(), R"({"query":"rust"})"));
    ASSERT_TRUE(r);
    ASSERT_NE(r->body.find("\"isError\":false"), std::string::npos);
  }
  quota::key_store store(s.data_dir());
  ASSERT_TRUE(store.suspend("acme").has_value());
  std::string body;
  const auto t0 = std::chrono::steady_clock::now();
  while (body.find("suspended") == std::string::npos && net::testing::ms_since(t0) < 5000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto r = ask(c, call_request(s.key(), R"({"query":"rust"})"));
    ASSERT_TRUE(r);
    body = r->body;
  }
  EXPECT_NE(body.find("suspended"), std::string::npos) << body;
  EXPECT_NE(body.find("\"isError\":true"), std::string::npos) << body;
}

// ---- /metrics and the access log -----------------------------------------------------------

std::string metrics_text(client& c) {
  auto r = ask(c, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
  return r ? r->body : "";
}

// The value of the series `name_and_labels` in a /metrics text, or -1 when absent.
double series(const std::string& text, const std::string& name_and_labels) {
  const std::string key = "\n" + name_and_labels + " ";
  const size_t at = text.find(key);
  if (at == std::string::npos) {
    return -1;
  }
  return std::stod(text.substr(at + key.size()));
}

std::string read_file(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
      out.append(buf, n);
    }
    std::fclose(f);
  }
  return out;
}

size_t count_lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

// Polls `path` until it holds `lines` lines (the cores flush on their ~100 ms tick).
std::string wait_for_lines(const std::string& path, size_t lines) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string text = read_file(path);
  while (count_lines(text) < lines && net::testing::ms_since(t0) < 5000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    text = read_file(path);
  }
  return text;
}

TEST(app_server_test, a_story_not_in_the_page_cache_parks_its_request_and_answers_it_whole) {
  // Verifies get_story never waits for the disk on the core: with the corpus' and the index
  // file's pages dropped from the page cache, a REST story and an MCP get_story are parked
  // while the core's ring reads their bytes (tollgate_story_read_aheads_total counts the
  // reads), then answered byte for byte as when cached; a search pipelined behind one on the
  // same connection is answered after it, in order; each call is billed once (the usage's
  // quota count), not at each delivery.
  TOLLGATE_SKIP_WITHOUT_RING();
  quota::test::temp_dir files;
  const std::string corpus = files.path() + "/stories.jsonl";
  std::string jsonl;
  search::generate_corpus(3000, 5, [&jsonl](std::string_view chunk) { jsonl += chunk; });
  {
    const int fd = ::open(corpus.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, jsonl.data(), jsonl.size()), static_cast<ssize_t>(jsonl.size()));
    ::close(fd);
  }
  std::vector<std::string> ids;
  for (size_t at = jsonl.find("{\"id\":\""); at != std::string::npos;
       at = jsonl.find("\n{\"id\":\"", at + 1)) {
    const size_t b = jsonl.find("\"id\":\"", at) + 6;
    ids.push_back(jsonl.substr(b, jsonl.find('"', b) - b));
  }
  ASSERT_EQ(ids.size(), 3000u);
  const std::vector<std::string> index_paths = {files.path() + "/stories.idx"};
  app_server s(0, 1e9, 1000000000, 1000000, {}, [&]() -> std::unique_ptr<search::backend> {
    search::load_options opts;
    opts.shards = 2;
    search::load_report rep;
    search::index_use use;
    auto b = search::load_indexed(corpus, index_paths, opts, rep, use);
    EXPECT_TRUE(b.has_value() && use.remapped);
    return b ? std::move(*b) : nullptr;
  });
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());

  uint64_t billed = 0;
  std::vector<std::string> picked;
  for (size_t i = 7; i < ids.size(); i += 499) {
    picked.push_back(ids[i]);
  }
  for (const std::string& id : picked) {
    SCOPED_TRACE(id);
    (void)tollgate::test::evict_from_page_cache(
        index_paths[0]);  // (its first pages stay: the server maps them)
    if (!tollgate::test::evict_from_page_cache(corpus)) {
      GTEST_SKIP() << "this file system keeps the files' pages cached: nothing to wait for";
    }
    auto cold = rest_get(c, s.key(), "/v1/stories/" + id);
    ASSERT_TRUE(cold);
    (void)tollgate::test::evict_from_page_cache(index_paths[0]);
    auto cold_mcp = ask(c, tool_request(s.key(), "get_story", "{\"id\":\"" + id + "\"}", 5));
    ASSERT_TRUE(cold_mcp);
    auto warm = rest_get(c, s.key(), "/v1/stories/" + id);
    auto warm_mcp = ask(c, tool_request(s.key(), "get_story", "{\"id\":\"" + id + "\"}", 5));
    ASSERT_TRUE(warm && warm_mcp);
    EXPECT_EQ(cold->status, 200) << cold->body;
    EXPECT_EQ(cold->body, warm->body);
    EXPECT_NE(cold->body.find("\"text\":\""), std::string::npos) << cold->body;
    EXPECT_EQ(cold_mcp->body, warm_mcp->body);
    EXPECT_NE(cold_mcp->body.find("\"isError\":false"), std::string::npos) << cold_mcp->body;
    billed += 4;
  }
  // A story whose bytes are being read, then a search on the same connection: in order.
  (void)tollgate::test::evict_from_page_cache(index_paths[0]);
  ASSERT_TRUE(c.send_all("GET /v1/stories/" + ids[1234] + " HTTP/1.1\r\nHost: t\r\nX-API-Key: " +
                         s.key() + "\r\n\r\nGET /v1/stories?q=the&limit=1 HTTP/1.1\r\nHost: t\r\n" +
                         "X-API-Key: " + s.key() + "\r\n\r\n"));
  auto first = c.read_response();
  auto second = c.read_response();
  ASSERT_TRUE(first && second);
  EXPECT_NE(first->body.find("\"id\":\"" + ids[1234] + "\""), std::string::npos) << first->body;
  EXPECT_NE(second->body.find("\"total\":"), std::string::npos) << second->body;
  billed += 2;

  auto usage = rest_get(c, s.key(), "/v1/usage");
  ASSERT_TRUE(usage);
  EXPECT_NE(usage->body.find("\"used\":" + std::to_string(billed) + ","), std::string::npos)
      << usage->body;
  const std::string m = metrics_text(c);
  // At least one read per story (a page the kernel still holds in a per-CPU batch when asked to
  // drop it stays cached: not every cold call finds its bytes missing).
  EXPECT_GE(series(m, "tollgate_story_read_aheads_total"), static_cast<double>(picked.size())) << m;
  EXPECT_EQ(series(m, "tollgate_story_read_ahead_errors_total"), 0.0) << m;
}

TEST(app_server_test, metrics_count_answers_by_outcome_latency_by_tool_and_billed_by_plan) {
  // Verifies /metrics' tollgate_answers_total names the error model's outcome of each request
  // on each route (REST's 429s told apart: quota vs rate), the latency histogram has one
  // observation per request under its route and tool with a cumulative +Inf bucket, and the
  // billed calls are counted under the key's plan.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(0, 0.001, 6, 2);  // 6 requests at once, then 429; 2 billed calls, then stop
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  auto r = rest_get(c, s.key(), "/v1/stories?q=rust&limit=1");
  ASSERT_TRUE(r && r->status == 200);
  r = ask(c, tool_request(s.key(), "get_story", R"({"id":"no-such-story"})", 2));
  ASSERT_TRUE(r && r->body.find("not_found") != std::string::npos);
  r = ask(c, call_request(s.key(), R"({"query":"linux","limit":1})"));
  ASSERT_TRUE(r && r->body.find("\"isError\":false") != std::string::npos);
  r = ask(c, call_request(s.key(), R"({"query":"memory","limit":1})"));
  ASSERT_TRUE(r && r->body.find("quota_exceeded") != std::string::npos) << (r ? r->body : "");
  r = ask(c, tool_request(s.key(), "no_such_tool", "{}", 3));
  ASSERT_TRUE(r && r->body.find("Unknown tool") != std::string::npos);
  r = rest_get(c, "tg_live_not_a_key", "/v1/usage");
  ASSERT_TRUE(r && r->status == 401);
  r = rest_get(c, s.key(), "/v1/stories?q=kernel&limit=1");  // 6th: quota used up
  ASSERT_TRUE(r && r->status == 429);
  r = rest_get(c, s.key(), "/v1/stories?q=kernel&limit=1");  // 7th: past the burst
  ASSERT_TRUE(r && r->status == 429);
  const std::string m = metrics_text(c);
  auto answers = [&](std::string_view route, std::string_view outcome) {
    return series(
        m, fmt::format("tollgate_answers_total{{route=\"{}\",outcome=\"{}\"}}", route, outcome));
  };
  EXPECT_EQ(answers("v1_stories", "ok"), 1) << m;
  EXPECT_EQ(answers("v1_stories", "quota_exceeded"), 1) << m;
  EXPECT_EQ(answers("v1_stories", "rate_limited"), 1) << m;
  EXPECT_EQ(answers("mcp", "ok"), 1) << m;
  EXPECT_EQ(answers("mcp", "quota_exceeded"), 1) << m;
  EXPECT_EQ(answers("mcp", "not_found"), 1) << m;
  EXPECT_EQ(answers("mcp", "unknown_tool"), 1) << m;
  EXPECT_EQ(answers("v1_usage", "invalid_key"), 1) << m;
  const std::string search = R"(route="mcp",tool="search_stories")";
  EXPECT_EQ(series(m, "tollgate_request_duration_seconds_count{" + search + "}"), 2) << m;
  EXPECT_EQ(series(m, "tollgate_request_duration_seconds_bucket{" + search + ",le=\"+Inf\"}"), 2)
      << m;
  EXPECT_GT(series(m, "tollgate_request_duration_seconds_sum{" + search + "}"), 0) << m;
  EXPECT_EQ(series(m, R"(tollgate_request_duration_seconds_count{route="mcp",tool="get_story"})"),
            1)
      << m;
  EXPECT_EQ(series(m, R"(tollgate_request_duration_seconds_count{route="mcp",tool=""})"), 1) << m;
  EXPECT_EQ(series(m, R"(tollgate_request_duration_seconds_count{route="v1_stories",tool=""})"), 3)
      << m;
  EXPECT_EQ(series(m, R"(tollgate_billed_calls_total{plan="t"})"), 2) << m;
  EXPECT_EQ(series(m, R"(tollgate_overage_calls_total{plan="t"})"), 0) << m;
  // What existed stays.
  EXPECT_EQ(series(m, R"(tollgate_requests_total{route="v1_stories",status="429"})"), 2) << m;
}

TEST(app_server_test, public_metrics_false_hides_metrics_on_the_public_listener) {
  // Verifies [server] public_metrics = false answers /metrics 404 on the public listener while
  // /healthz still answers.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(0, 1e9, 1000000000, 1000, [](config::settings& st) { st.public_metrics = false; });
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  auto r = ask(c, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body.find("tollgate_"), std::string::npos);
  r = ask(c, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(app_server_test, access_log_writes_one_json_line_per_answer_and_reopens) {
  // Verifies the access log's lines (fields, the key id and never the key itself), that the
  // lines counted on /metrics match, and that a reopen (SIGUSR1's action) moves later lines to
  // a new file at the same path while the renamed one keeps the earlier ones.
  TOLLGATE_SKIP_WITHOUT_RING();
  quota::test::temp_dir logs;
  const std::string path = logs.path() + "/access.log";
  app_server s(0, 1e9, 1000000000, 1000, [&](config::settings& st) { st.access_log = path; });
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(rest_get(c, s.key(), "/v1/stories?q=rust&limit=1"));
  ASSERT_TRUE(ask(c, tool_request(s.key(), "get_story", R"({"id":"no-such-story"})", 2)));
  ASSERT_TRUE(rest_get(c, "tg_live_not_a_key", "/v1/usage"));
  const std::string text = wait_for_lines(path, 3);
  ASSERT_EQ(count_lines(text), 3u) << text;
  EXPECT_EQ(text.find(s.key()), std::string::npos) << "the key itself was logged";
  EXPECT_EQ(text.find("tg_live_not_a_key"), std::string::npos);
  std::vector<std::string> lines;
  for (size_t b = 0, e; (e = text.find('\n', b)) != std::string::npos; b = e + 1) {
    lines.push_back(text.substr(b, e - b));
  }
  EXPECT_EQ(lines[0].rfind("{\"time\":\"20", 0), 0u) << lines[0];
  EXPECT_EQ(lines[0].back(), '}');
  EXPECT_NE(lines[0].find(R"("core":0,"remote":"127.0.0.1:)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("method":"GET","route":"v1_stories")"), std::string::npos);
  EXPECT_NE(lines[0].find(R"("key_id":")" + s.key_id() + R"(","account":"acme")"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find(R"("status":200,"outcome":"ok","billed":true,"overage":false)"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find(R"("latency_us":)"), std::string::npos);
  EXPECT_NE(lines[1].find(R"("route":"mcp","mcp_method":"tools/call","tool":"get_story")"),
            std::string::npos)
      << lines[1];
  EXPECT_NE(lines[1].find(R"("outcome":"not_found","billed":false)"), std::string::npos);
  EXPECT_NE(lines[2].find(R"("status":401,"outcome":"invalid_key")"), std::string::npos)
      << lines[2];
  EXPECT_EQ(lines[2].find("key_id"), std::string::npos) << lines[2];

  ASSERT_EQ(std::rename(path.c_str(), (path + ".1").c_str()), 0);
  s.state().access->request_reopen();
  // The reopen happens at the core's next flush; lines answered before it may still land in
  // the renamed file, so ask until one reaches the new one.
  const auto t0 = std::chrono::steady_clock::now();
  while (read_file(path).empty() && net::testing::ms_since(t0) < 5000) {
    ASSERT_TRUE(rest_get(c, s.key(), "/v1/usage"));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  const std::string fresh = read_file(path);
  EXPECT_NE(fresh.find(R"("route":"v1_usage")"), std::string::npos) << fresh;
  const std::string old = read_file(path + ".1");
  EXPECT_EQ(old.substr(0, text.size()), text);
  const std::string m = metrics_text(c);
  EXPECT_GE(series(m, "tollgate_access_log_lines_total"), 4) << m;
  EXPECT_EQ(series(m, "tollgate_access_log_dropped_lines_total"), 0) << m;
}

TEST(app_server_test, access_log_sampling_keeps_every_error) {
  // Verifies [log] sample = 0 logs no successful request and still every error.
  TOLLGATE_SKIP_WITHOUT_RING();
  quota::test::temp_dir logs;
  const std::string path = logs.path() + "/access.log";
  app_server s(0, 1e9, 1000000000, 1000, [&](config::settings& st) {
    st.access_log = path;
    st.log_sample = 0;
  });
  ASSERT_TRUE(s.started());
  client c(s.port());
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(rest_get(c, s.key(), "/v1/stories?q=rust&limit=1"));
  }
  ASSERT_TRUE(rest_get(c, s.key(), "/v1/stories/no-such-story"));
  ASSERT_TRUE(rest_get(c, s.key(), "/v1/stories?q=rust&limit=1"));
  const std::string text = wait_for_lines(path, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // two more ticks
  const std::string later = read_file(path);
  EXPECT_EQ(count_lines(later), 1u) << later;
  EXPECT_NE(later.find(R"("status":404,"outcome":"not_found")"), std::string::npos) << later;
}

TEST(app_server_test, access_log_on_a_full_disk_drops_and_counts_lines_and_keeps_serving) {
  // Verifies that when the log's file system is full (a real 16 KiB tmpfs) the lines that
  // cannot be written are counted on /metrics as dropped and every request is still answered.
  TOLLGATE_SKIP_WITHOUT_RING();
  quota::test::temp_dir mnt;
  if (::mount("tmpfs", mnt.path().c_str(), "tmpfs", 0, "size=16k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  }
  const std::string path = mnt.path() + "/access.log";
  {
    app_server s(0, 1e9, 1000000000, 1000000, [&](config::settings& st) { st.access_log = path; });
    ASSERT_TRUE(s.started());
    client c(s.port());
    ASSERT_TRUE(c.connected());
    double dropped = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (dropped <= 0 && net::testing::ms_since(t0) < 10000) {
      for (int i = 0; i < 50; ++i) {
        auto r = rest_get(c, s.key(), "/v1/stories?q=rust&limit=1");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      dropped = series(metrics_text(c), "tollgate_access_log_dropped_lines_total");
    }
    EXPECT_GT(dropped, 0);
    EXPECT_GT(series(metrics_text(c), "tollgate_access_log_lines_total"), 0);
    auto r = rest_get(c, s.key(), "/v1/usage");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  ::umount2(mnt.path().c_str(), MNT_DETACH);
}

// The head of a POST /mcp tools/call with `Expect: 100-continue` (the body follows later).
std::string expect_head(std::string_view key, std::string_view origin, size_t body_len) {
  std::string h =
      "POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
      "Accept: application/json, text/event-stream\r\nExpect: 100-continue\r\n";
  if (!key.empty()) {
    h += "Authorization: Bearer " + std::string(key) + "\r\n";
  }
  if (!origin.empty()) {
    h += "Origin: " + std::string(origin) + "\r\n";
  }
  return h + "Content-Length: " + std::to_string(body_len) + "\r\n\r\n";
}

TEST(app_server_test, expect_100_continue_gets_a_refusal_without_being_invited) {
  // Verifies a bad key (401) or a forbidden Origin (403) with Expect: 100-continue is answered
  // with its final status and Connection: close, never "100 Continue" first; the body sent
  // anyway is dropped and the connection closes. A good request is still invited and served.
  TOLLGATE_SKIP_WITHOUT_RING();
  app_server s(0, 1e9, 1000000000, 1000000000);
  ASSERT_TRUE(s.started());
  const std::string body =
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories",)"
      R"("arguments":{"query":"rust"}}})";
  struct refusal {
    std::string key;
    std::string origin;
    int status;
  };
  for (const refusal& f : {refusal{"tg_live_wrong", "", 401}, refusal{"", "", 401},
                           refusal{s.key(), "https://evil.example", 403}}) {
    client c(s.port());
    ASSERT_TRUE(c.send_all(expect_head(f.key, f.origin, body.size())));
    auto r = c.read_response(3000);
    ASSERT_TRUE(r.has_value()) << f.status;
    EXPECT_EQ(r->status, f.status) << r->head;
    EXPECT_TRUE(r->has_header("onnection: close")) << r->head;
    ASSERT_TRUE(c.send_all(body));
    EXPECT_TRUE(c.wait_closed()) << f.status;
    EXPECT_EQ(c.pending(), "") << f.status;
  }
  client c(s.port());
  ASSERT_TRUE(c.send_all(expect_head(s.key(), "http://localhost:3000", body.size())));
  auto interim = c.read_response(3000);
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.send_all(body));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"isError\":false"), std::string::npos) << r->body;
}

}  // namespace
}  // namespace tollgate::app
