// Searches in slices and story reads through one core_handler whose engine parks requests (a
// fake engine_io: the real ring's deferral and reads are tested in server_test.cc and the
// integration tests): what a burst of parked searches leaves behind once answered, and how a
// story whose bytes are not in the page cache ends when its reads fail or do not stay.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "app/handler_world.h"
#include "support/page_cache.h"
#include "tollgate/search/corpus.h"

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
  bool read_ahead(int fd, uint64_t at, size_t len, uint32_t tag) override {
    reads.push_back({fd, at, len, tag});
    return true;
  }
  http::deferral_token now;
  struct read {
    int fd;
    uint64_t at;
    size_t len;
    uint32_t tag;
  };
  std::vector<read> reads;  // read_ahead() calls, none of them done (the test completes them)
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

// A corpus file of generated stories, loaded without an index: get_story reads each story's
// line from the file (pread), where the page cache may not hold it.
class cold_corpus {
 public:
  cold_corpus() {
    char tmpl[] = "/tmp/tollgate-cold-corpus-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    dir_ = p != nullptr ? p : "";
    path_ = dir_ + "/stories.jsonl";
    std::string jsonl;
    search::generate_corpus(2000, 9, [&jsonl](std::string_view chunk) { jsonl += chunk; });
    for (size_t at = 0; at < jsonl.size();) {
      const size_t end = jsonl.find('\n', at);
      const size_t b = jsonl.find("\"id\":\"", at) + 6;
      lines_.push_back({jsonl.substr(b, jsonl.find('"', b) - b), at, end - at});
      at = end + 1;
    }
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ok_ = fd >= 0 && ::write(fd, jsonl.data(), jsonl.size()) == static_cast<ssize_t>(jsonl.size());
    if (fd >= 0) {
      ::close(fd);
    }
  }
  ~cold_corpus() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool ok() const { return ok_; }
  std::unique_ptr<search::backend> load() const {
    search::load_options opts;
    opts.shards = 2;
    search::load_report rep;
    auto b = search::load_jsonl_file(path_, opts, rep);
    return b ? std::move(*b) : nullptr;
  }
  /// Drops the file from the page cache; false when it stays (then there is nothing to test).
  bool evict() const { return tollgate::test::evict_from_page_cache(path_); }
  /// The same, until story `i`'s line is out of the page cache (at most a second).
  bool evict(size_t i) const {
    return tollgate::test::evict_from_page_cache(path_, lines_[i].at, lines_[i].len, 1000);
  }
  /// Reads story `i`'s line into the page cache.
  void warm(size_t i) const {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    std::string buf(lines_[i].len, '\0');
    (void)::pread(fd, buf.data(), buf.size(), static_cast<off_t>(lines_[i].at));
    ::close(fd);
  }
  const std::string& id(size_t i) const { return lines_[i].id; }
  size_t count() const { return lines_.size(); }

 private:
  struct line {
    std::string id;
    size_t at, len;
  };
  std::string dir_, path_;
  std::vector<line> lines_;
  bool ok_ = false;
};

std::string rest_story(std::string_view key, std::string_view id) {
  return "GET /v1/stories/" + std::string(id) + " HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
         std::string(key) + "\r\n\r\n";
}

TEST(parked_jobs_test, a_story_read_that_fails_or_does_not_stay_is_read_on_the_core_at_last) {
  // Verifies a get_story whose line is not in the page cache parks for a read-ahead and, however
  // that ends, is answered: after a failed read (-EIO) its next delivery reads on the core, and
  // when the bytes read do not stay cached (evicted again each time) it parks for at most
  // max_read_rounds reads, then reads on the core. Each is answered with its story (the file is
  // fine) and billed once. A get_story after a call billed earlier in the same batch never parks
  // (its re-delivery would bill that call again): it reads on the core at once.
  cold_corpus corpus;
  ASSERT_TRUE(corpus.ok());
  handler_world w(corpus.load());
  ASSERT_TRUE(w.ok());
  fake_io io;
  w.handler().attach(io);
  const int64_t now = w.start_ns();
  if (!corpus.evict()) {
    GTEST_SKIP() << "this file system keeps the corpus' pages cached: nothing to wait for";
  }
  uint32_t slot = 100;

  // Delivers `req(i)` for story i = first, first + 37, ... until one parks for its bytes; that
  // story, or -1. Many may not: a page the kernel still held in a per-CPU batch when asked to
  // drop it stays cached, and a read that must not wait can find its bytes all the same when
  // the read-ahead it starts completes at once (on a loaded host most of the attempts, so that
  // ten of them all failed in about a quarter of the runs; 40 are tried).
  auto park_one = [&](size_t first, const std::function<std::string(size_t)>& req) -> int {
    for (size_t i = first; i < std::min(first + 40 * 37, corpus.count()); i += 37) {
      if (!corpus.evict(i)) {  // its line still cached after a second: another story
        continue;
      }
      io.now = {slot++, 1};
      io.reads.clear();
      if (w.respond(req(i), now).empty()) {
        EXPECT_EQ(io.reads.size(), 1u);
        EXPECT_GT(io.reads.empty() ? 0 : io.reads[0].len, 0u);
        return static_cast<int>(i);
      }
    }
    return -1;
  };

  // 1. MCP, a read-ahead that fails.
  {
    const int64_t before = quota_used(w, io, w.roomy(), now);
    auto req = [&](size_t i) { return mcp_post(w.roomy(), story_json(1, corpus.id(i))); };
    const int i = park_one(10, req);
    ASSERT_GE(i, 0) << "no get_story parked for its bytes";
    const int64_t answered = quota_used(w, io, w.roomy(), now) - before;  // those not parked
    io.now = {slot - 1, 1};
    w.handler().on_read_ahead(io.reads[0].tag, -EIO);
    const std::string r = w.respond(req(static_cast<size_t>(i)), now);
    ASSERT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
    EXPECT_NE(r.find(R"(\"id\":\")" + corpus.id(static_cast<size_t>(i))), std::string::npos) << r;
    EXPECT_EQ(r.find(R"("isError":true)"), std::string::npos) << r;
    EXPECT_EQ(io.reads.size(), 1u) << "asked for the bytes again after a failed read";
    EXPECT_EQ(quota_used(w, io, w.roomy(), now), before + answered + 1);
  }
  // 2. REST, bytes that never stay cached.
  {
    auto req = [&](size_t i) { return rest_story(w.roomy(), corpus.id(i)); };
    // Evicted before each delivery, the bytes are not there when asked for, and the answer
    // comes from the core's read after exactly max_read_rounds reads. A delivery can still find
    // them (see park_one) and be answered sooner, with fewer reads: then again with another
    // story, up to five times; an answer never comes after more reads, nor never.
    size_t first = 500;
    for (int attempt = 0; attempt < 5; ++attempt) {
      const int64_t before = quota_used(w, io, w.roomy(), now);
      const int i = park_one(first, req);
      ASSERT_GE(i, 0) << "no story parked for its bytes";
      first = static_cast<size_t>(i) + 1;
      const int64_t answered = quota_used(w, io, w.roomy(), now) - before;
      io.now = {slot - 1, 1};
      std::string r;
      for (int delivery = 0; delivery < 20 && r.empty(); ++delivery) {
        ASSERT_FALSE(io.reads.empty());
        // (the kernel itself starts reading what a read that must not wait did not find)
        ASSERT_TRUE(corpus.evict(static_cast<size_t>(i)));
        w.handler().on_read_ahead(io.reads.back().tag, static_cast<int64_t>(io.reads.back().len));
        r = w.respond(req(static_cast<size_t>(i)), now);
      }
      ASSERT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
      EXPECT_NE(r.find("\"id\":\"" + corpus.id(static_cast<size_t>(i)) + "\""), std::string::npos)
          << r;
      EXPECT_EQ(quota_used(w, io, w.roomy(), now), before + answered + 1);
      ASSERT_LE(io.reads.size(), size_t{parking::max_read_rounds});
      if (io.reads.size() == parking::max_read_rounds) {
        break;
      }
      ASSERT_LT(attempt, 4) << "every story was answered before max_read_rounds reads";
    }
  }
  // 3. A batch: a billed get_story, then one whose line is not cached.
  {
    const int64_t before = quota_used(w, io, w.roomy(), now);
    ASSERT_TRUE(corpus.evict());
    corpus.warm(20);
    const std::string batch =
        "[" + story_json(1, corpus.id(20)) + "," + story_json(2, corpus.id(1500)) + "]";
    io.now = {slot, 1};
    io.reads.clear();
    const std::string r = w.respond(mcp_post(w.roomy(), batch), now);
    ASSERT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
    EXPECT_NE(r.find(R"(\"id\":\")" + corpus.id(20)), std::string::npos) << r;
    EXPECT_NE(r.find(R"(\"id\":\")" + corpus.id(1500)), std::string::npos) << r;
    EXPECT_TRUE(io.reads.empty());
    EXPECT_EQ(quota_used(w, io, w.roomy(), now), before + 2);
  }
}

}  // namespace
}  // namespace tollgate::app
