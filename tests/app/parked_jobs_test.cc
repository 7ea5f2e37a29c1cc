// Searches in slices through one core_handler whose engine parks requests (a fake engine_io:
// the real ring's deferral is tested in server_test.cc and the integration tests): what a burst
// of parked searches leaves behind once answered.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "app/handler_world.h"

namespace tollgate::app {
namespace {

using test::handler_world;

// Parks and re-delivers as the engine would, one request at a time: `now` is the request being
// handled; every connection stays open.
class fake_io final : public http::engine_io {
 public:
  http::deferral_token defer() override { return now; }
  http::deferral_token current() const override { return now; }
  bool resume(http::deferral_token) override { return true; }
  uint32_t add_upstream(std::string_view, uint16_t) override { return 0; }
  void fetch(uint32_t, std::string_view, uint64_t, int64_t) override {}
  int64_t now_mono() const override { return 0; }
  http::deferral_token now;
};

std::string search_request(std::string_view key, std::string_view query) {
  const std::string body =
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories",)"
      R"("arguments":{"query":")" +
      std::string(query) + R"(","limit":10}}})";
  return "POST /mcp HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + std::string(key) +
         "\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
         "MCP-Protocol-Version: 2025-06-18\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(parked_jobs_test, a_burst_of_parked_searches_keeps_only_a_few_job_groups) {
  // Verifies 40 searches parked at once (slices of one posting) are each delivered again until
  // answered with a real result, and that the handler then keeps at most
  // max_spare_job_groups of their job groups (each holds workspaces grown to a search's needs)
  // for later parked searches: it used to keep every one, so a burst's memory stayed for good.
  handler_world w;
  ASSERT_TRUE(w.ok());
  w.settings().search_slice_postings = 1;
  fake_io io;
  w.handler().attach(io);
  const std::string req = search_request(w.roomy(), "the to");
  constexpr uint32_t n = 40;
  for (uint32_t i = 0; i < n; ++i) {
    io.now = {i, 1};
    ASSERT_EQ(w.respond(req, w.start_ns()), "") << "request " << i << " was not parked";
  }
  std::vector<bool> answered(n, false);
  uint32_t left = n;
  for (int pass = 0; pass < 1000000 && left > 0; ++pass) {
    for (uint32_t i = 0; i < n; ++i) {
      if (answered[i]) {
        continue;
      }
      io.now = {i, 1};
      const std::string r = w.respond(req, w.start_ns());
      if (!r.empty()) {
        answered[i] = true;
        --left;
        EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
        EXPECT_NE(r.find(R"(\"total\":)"), std::string::npos) << r;
        EXPECT_EQ(r.find(R"("isError":true)"), std::string::npos) << r;
      }
    }
  }
  ASSERT_EQ(left, 0u);
  EXPECT_EQ(w.handler().spare_job_groups(), core_handler::max_spare_job_groups);
  // A later burst reuses the kept groups and leaves the same number.
  io.now = {n, 1};
  ASSERT_EQ(w.respond(req, w.start_ns()), "");
  EXPECT_EQ(w.handler().spare_job_groups(), core_handler::max_spare_job_groups - 1);
}

// The `used` figure of `key`'s quota, from GET /v1/usage.
int64_t quota_used(handler_world& w, fake_io& io, const std::string& key, int64_t now_ns) {
  io.now = {999, 1};
  const std::string r = w.respond(
      "GET /v1/usage HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key + "\r\n\r\n", now_ns);
  const size_t at = r.find("\"used\":");
  return at == std::string::npos ? -1 : std::stoll(r.substr(at + 7));
}

// Delivers `req` (connection `slot`) until it is answered; the answer.
std::string answer_of(handler_world& w, fake_io& io, const std::string& req, uint32_t slot,
                      int64_t now_ns) {
  for (int pass = 0; pass < 1000000; ++pass) {
    io.now = {slot, 1};
    std::string r = w.respond(req, now_ns);
    if (!r.empty()) {
      return r;
    }
  }
  return {};
}

// A POST of `body` under revision 2025-03-26, the one that takes batches.
std::string mcp_post(std::string_view key, const std::string& body) {
  return "POST /mcp HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + std::string(key) +
         "\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
         "MCP-Protocol-Version: 2025-03-26\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string call_json(int id, std::string_view query) {
  return R"({"jsonrpc":"2.0","id":)" + std::to_string(id) +
         R"(,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":")" +
         std::string(query) + R"(","limit":10}}})";
}

TEST(parked_jobs_test, a_batch_of_searches_in_slices_is_answered_whole_and_billed_once_each) {
  // Verifies a batch of three heavy searches in slices of one posting is parked, answered with
  // every call's result, and billed once per call (three units), although its deliveries
  // started the searches one after another.
  handler_world w;
  ASSERT_TRUE(w.ok());
  w.settings().search_slice_postings = 1;
  fake_io io;
  w.handler().attach(io);
  const int64_t now = w.start_ns();
  const int64_t before = quota_used(w, io, w.roomy(), now);
  ASSERT_GE(before, 0);
  const std::string batch = "[" + call_json(1, "the to") + "," + call_json(2, "of the a") + "," +
                            call_json(3, "the a") + "]";
  const std::string r = answer_of(w, io, mcp_post(w.roomy(), batch), 1, now);
  ASSERT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  EXPECT_EQ(r.find(R"("isError":true)"), std::string::npos) << r;
  for (const char* id : {R"("id":1)", R"("id":2)", R"("id":3)"}) {
    EXPECT_NE(r.find(id), std::string::npos) << r;
  }
  EXPECT_EQ(quota_used(w, io, w.roomy(), now), before + 3);
}

// The id of the first story a REST search for `q` returns (REST runs every search whole).
std::string first_story_id(handler_world& w, fake_io& io, const std::string& key, int64_t now_ns) {
  io.now = {998, 1};
  const std::string r = w.respond(
      "GET /v1/stories?q=rust HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key + "\r\n\r\n",
      now_ns);
  const size_t at = r.find("\"id\":\"");
  return at == std::string::npos ? std::string() : r.substr(at + 6, r.find('"', at + 6) - at - 6);
}

std::string story_json(int id, const std::string& story) {
  return R"({"jsonrpc":"2.0","id":)" + std::to_string(id) +
         R"(,"method":"tools/call","params":{"name":"get_story","arguments":{"id":")" + story +
         R"("}}})";
}

TEST(parked_jobs_test, a_billed_call_beside_a_search_in_slices_is_billed_once) {
  // Verifies a batch holding get_story (billed) and a heavy search in slices of one posting,
  // in either order, is answered with both results and billed two units: a get_story after the
  // search's yield is not billed in the discarded delivery, and a search after a billed
  // get_story runs whole rather than yield (its re-delivery would bill the get_story again).
  handler_world w;
  ASSERT_TRUE(w.ok());
  w.settings().search_slice_postings = 1;
  fake_io io;
  w.handler().attach(io);
  const int64_t now = w.start_ns();
  const std::string story = first_story_id(w, io, w.roomy(), now);
  ASSERT_FALSE(story.empty());
  uint32_t slot = 10;
  for (bool story_first : {true, false}) {
    const int64_t before = quota_used(w, io, w.roomy(), now);
    const std::string batch = story_first
                                  ? "[" + story_json(1, story) + "," + call_json(2, "the to") + "]"
                                  : "[" + call_json(2, "the to") + "," + story_json(1, story) + "]";
    const std::string r = answer_of(w, io, mcp_post(w.roomy(), batch), slot++, now);
    ASSERT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
    EXPECT_EQ(r.find(R"("isError":true)"), std::string::npos) << r;
    EXPECT_NE(r.find(R"(\"text\":)"), std::string::npos) << r;   // the story
    EXPECT_NE(r.find(R"(\"total\":)"), std::string::npos) << r;  // the search
    EXPECT_EQ(quota_used(w, io, w.roomy(), now), before + 2)
        << (story_first ? "get_story first" : "search first");
  }
}

}  // namespace
}  // namespace tollgate::app
