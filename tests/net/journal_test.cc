// The engine's journal step over real loopback sockets and a real io_uring: a handler that
// journals one record per request never has a response observed before that record is in the
// file, and a journal that cannot be written holds the responses (no crash) until it can.
// Each test runs with both ways of writing (server_options::journal_inline): write(2) on the
// core's thread and an io_uring write.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "net/net_test_util.h"

namespace tollgate::net {
namespace {

using testing::client;
using testing::get;
using testing::test_options;

constexpr size_t kRecord = 16;

struct journal_counters {
  std::atomic<uint64_t> writes_ok{0};
  std::atomic<uint64_t> write_errors{0};
  std::atomic<uint64_t> syncs{0};
  std::atomic<int> last_error{0};
};

/// Journals one 16-byte record per request and answers with the file offset just past that
/// record ("<end offset>"), so a client can check the record is in the file when it sees the
/// answer; GET /free journals nothing and answers "free" (an unbilled answer). Double-buffered
/// like the quota core ledger: bytes handed to the engine never move.
class journal_handler : public http::handler {
 public:
  journal_handler(std::atomic<int>* fd, journal_counters* n) : fd_(fd), n_(n) {
    pending_.reserve(1 << 16);
    taken_.reserve(1 << 16);
  }
  http::response_info handle(const http::request& req, out_buffer& out, int64_t) override {
    if (req.path == "/free") {
      out.append("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfree");
      return {200, false};
    }
    char rec[kRecord + 1];
    std::snprintf(rec, sizeof rec, "rec%012llu\n", static_cast<unsigned long long>(count_));
    pending_.append(rec, kRecord);
    ++count_;
    char end[24];
    const auto e = std::to_chars(end, end + sizeof end, count_ * kRecord).ptr;
    const auto len = static_cast<size_t>(e - end);
    char cl[24];
    const auto ce = std::to_chars(cl, cl + sizeof cl, len).ptr;
    out.append("HTTP/1.1 200 OK\r\nContent-Length: ");
    out.append(cl, static_cast<size_t>(ce - cl));
    out.append(req.keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
    out.append(end, len);
    http::response_info info{200, !req.keep_alive};
    info.durable = true;
    return info;
  }
  /// After this many failed writes (0: never) the next batch drops every unwritten record, as
  /// the quota core does after journal_give_up_ms.
  void give_up_after(uint64_t errors) { give_up_after_ = errors; }
  http::durable_batch durable_pending() override {
    bool dropped = false;
    if (give_up_after_ != 0 && n_->write_errors.load() >= give_up_after_ &&
        !(taken_.empty() && pending_.empty())) {
      taken_.clear();
      pending_.clear();
      dropped = true;
    }
    if (taken_.empty()) {
      std::swap(pending_, taken_);
    }
    http::durable_batch b;
    b.fd = fd_->load();
    b.data = taken_.data();
    b.size = taken_.size();
    b.sync_due = (++passes_ % 8) == 0;
    b.dropped = dropped;
    return b;
  }
  void durable_written(int64_t res) override {
    if (res < 0) {
      n_->write_errors.fetch_add(1);
      n_->last_error.store(static_cast<int>(-res));
      return;  // the bytes stay in taken_ and are handed out again
    }
    taken_.erase(0, static_cast<size_t>(res));
    n_->writes_ok.fetch_add(1);
  }
  void durable_synced(int res) override {
    if (res == 0) {
      n_->syncs.fetch_add(1);
    }
  }

 private:
  std::atomic<int>* fd_;
  journal_counters* n_;
  std::string pending_;
  std::string taken_;
  uint64_t count_ = 0;
  uint64_t passes_ = 0;
  uint64_t give_up_after_ = 0;
};

std::string temp_path(const char* tag) {
  const char* dir = std::getenv("TMPDIR");
  std::string p = dir != nullptr ? dir : "/tmp";
  p += "/tollgate-journal-";
  p += tag;
  p += "-";
  p += std::to_string(::getpid());
  return p;
}

/// A new, empty append-only journal file at `path` (any old one removed); -1 on failure.
int open_fresh_journal(const std::string& path) {
  ::unlink(path.c_str());
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

uint64_t parse_u64(const std::string& s) {
  uint64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

/// The test's options with the journal written inline (write(2)) or through the ring.
class net_journal_test : public ::testing::TestWithParam<bool> {
 protected:
  static server_options options() {
    server_options o = test_options();
    o.journal_inline = GetParam();
    return o;
  }
};

INSTANTIATE_TEST_SUITE_P(write_modes, net_journal_test, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "inline" : "ring");
                         });

/// Sends one billed request on `c`, waits for at least `errors` failed journal writes, and
/// checks the last one failed with `err` and that nothing reached the client meanwhile.
void send_and_expect_held(client& c, const journal_counters& n, uint64_t errors, int err) {
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send_all(get("/bill")));
  ASSERT_TRUE(testing::eventually([&] { return n.write_errors.load() >= errors; }));
  EXPECT_EQ(n.last_error.load(), err);
  EXPECT_EQ(c.read_some(200), -1);
  EXPECT_TRUE(c.pending().empty());
}

struct started {
  server srv;
  started(server_options o, std::atomic<int>* fd, journal_counters* n, uint64_t give_up = 0)
      : srv(o) {
    auto r = srv.start([fd, n, give_up](int) {
      auto h = std::make_unique<journal_handler>(fd, n);
      h->give_up_after(give_up);
      return h;
    });
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error());
    ok = r.has_value();
  }
  bool ok = false;
};

TEST_P(net_journal_test, never_shows_a_response_before_its_record_is_in_the_file) {
  // Verifies that with 8 connections pipelining 200 requests each, every response's record
  // (the file offset the response names) is already in the journal file when the client reads
  // that response, and that the periodic journal fdatasync runs through the ring.
  TOLLGATE_SKIP_WITHOUT_RING();
  const std::string path = temp_path("order");
  std::atomic<int> fd{open_fresh_journal(path)};
  ASSERT_GE(fd.load(), 0);
  journal_counters n;
  {
    started s(options(), &fd, &n);
    ASSERT_TRUE(s.ok);
    constexpr int kConns = 8;
    constexpr int kPerConn = 200;
    constexpr int kBatch = 10;
    std::atomic<int> bad{0};
    std::atomic<int> answered{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kConns; ++t) {
      threads.emplace_back([&] {
        client c(s.srv.port());
        if (!c.connected()) {
          bad.fetch_add(1);
          return;
        }
        for (int i = 0; i < kPerConn; i += kBatch) {
          std::string batch;
          for (int k = 0; k < kBatch; ++k) {
            batch += get("/bill");
          }
          if (!c.send_all(batch)) {
            bad.fetch_add(1);
            return;
          }
          for (int k = 0; k < kBatch; ++k) {
            auto r = c.read_response(10000);
            if (!r.has_value() || r->status != 200) {
              bad.fetch_add(1);
              return;
            }
            // The record this response bills ends at this offset: it must be on file now.
            if (file_size(path) < parse_u64(r->body)) {
              bad.fetch_add(1);
            }
            answered.fetch_add(1);
          }
        }
      });
    }
    for (auto& th : threads) {
      th.join();
    }
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(answered.load(), kConns * kPerConn);
    EXPECT_EQ(file_size(path), uint64_t{kConns * kPerConn} * kRecord);
    EXPECT_GT(n.writes_ok.load(), 0u);
    EXPECT_EQ(n.write_errors.load(), 0u);
    EXPECT_TRUE(testing::eventually([&] { return n.syncs.load() > 0; }));
    EXPECT_GT(testing::total(
                  s.srv, [](const core_stats& st) -> auto& { return st.journal_writes; }),
              0u);
  }
  ::close(fd.load());
  ::unlink(path.c_str());
}

TEST_P(net_journal_test, holds_responses_while_the_journal_fails_then_sends_them) {
  // Verifies that while the journal fd rejects writes (a read-only fd: EBADF) the response is
  // not sent and the error is reported, the engine keeps serving (no crash), and once the fd is
  // writable again the same record is written (not lost) and only then the response arrives.
  TOLLGATE_SKIP_WITHOUT_RING();
  const std::string path = temp_path("fail");
  const int wfd = open_fresh_journal(path);
  ASSERT_GE(wfd, 0);
  const int rfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(rfd, 0);
  std::atomic<int> fd{rfd};
  journal_counters n;
  {
    started s(options(), &fd, &n);
    ASSERT_TRUE(s.ok);
    client c(s.srv.port());
    // Two failed writes (retried after a back-off) and still nothing on the wire or on file.
    send_and_expect_held(c, n, 2, EBADF);
    EXPECT_EQ(file_size(path), 0u);
    EXPECT_GT(testing::total(
                  s.srv, [](const core_stats& st) -> auto& { return st.journal_errors; }),
              0u);
    fd.store(wfd);  // the disk is back
    auto r = c.read_response(10000);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(parse_u64(r->body), kRecord);
    EXPECT_EQ(file_size(path), kRecord);
    // And the connection keeps working.
    ASSERT_TRUE(c.send_all(get("/bill")));
    auto r2 = c.read_response(10000);
    ASSERT_TRUE(r2.has_value());
    EXPECT_EQ(parse_u64(r2->body), 2 * kRecord);
    EXPECT_GE(file_size(path), 2 * kRecord);
  }
  ::close(wfd);
  ::close(rfd);
  ::unlink(path.c_str());
}

TEST_P(net_journal_test, reports_a_full_disk_without_sending_or_crashing) {
  // Verifies that a journal on a full device (/dev/full: ENOSPC) holds the response, reports
  // the error to the handler, and the server still stops cleanly with the request unanswered.
  TOLLGATE_SKIP_WITHOUT_RING();
  const int ffd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (ffd < 0) {
    GTEST_SKIP() << "no /dev/full";
  }
  std::atomic<int> fd{ffd};
  journal_counters n;
  {
    server_options o = options();
    o.shutdown_timeout_ms = 300;
    started s(o, &fd, &n);
    ASSERT_TRUE(s.ok);
    client c(s.srv.port());
    send_and_expect_held(c, n, 1, ENOSPC);
    s.srv.stop();
    s.srv.wait();
    // Closed at the drain deadline without the unbilled response.
    EXPECT_TRUE(c.wait_closed(5000));
    EXPECT_EQ(c.pending().find("HTTP/1.1 200"), std::string::npos);
  }
  ::close(ffd);
}

TEST_P(net_journal_test, unbilled_answers_never_wait_for_a_failing_journal) {
  // Verifies that while the journal fails (/dev/full: ENOSPC) and a billed answer is held, an
  // answer that journaled nothing is sent at once on every other connection, and the held count
  // is exported; the billed answer stays unsent.
  TOLLGATE_SKIP_WITHOUT_RING();
  const int ffd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (ffd < 0) {
    GTEST_SKIP() << "no /dev/full";
  }
  std::atomic<int> fd{ffd};
  journal_counters n;
  {
    server_options o = options();
    o.shutdown_timeout_ms = 300;
    started s(o, &fd, &n);
    ASSERT_TRUE(s.ok);
    client billed(s.srv.port());
    send_and_expect_held(billed, n, 1, ENOSPC);
    EXPECT_EQ(testing::total(
                  s.srv, [](const core_stats& st) -> auto& { return st.journal_held; }),
              1u);
    for (int i = 0; i < 3; ++i) {
      client c(s.srv.port());
      ASSERT_TRUE(c.send_all(get("/free")));
      auto r = c.read_response(2000);
      ASSERT_TRUE(r.has_value()) << i;
      EXPECT_EQ(r->body, "free");
    }
    EXPECT_EQ(billed.read_some(100), -1);
    EXPECT_TRUE(billed.pending().empty());
    s.srv.stop();
    s.srv.wait();
  }
  ::close(ffd);
}

TEST_P(net_journal_test, answers_whose_records_are_dropped_become_503_and_close) {
  // Verifies that when the handler gives up on a failing journal (durable_batch::dropped), the
  // held billed answers are never sent: each connection holding one gets 503 + Retry-After
  // saying usage cannot be recorded, then the close; other connections are unaffected.
  TOLLGATE_SKIP_WITHOUT_RING();
  const int ffd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (ffd < 0) {
    GTEST_SKIP() << "no /dev/full";
  }
  std::atomic<int> fd{ffd};
  journal_counters n;
  {
    started s(options(), &fd, &n, 2);
    ASSERT_TRUE(s.ok);
    client billed(s.srv.port());
    ASSERT_TRUE(billed.send_all(get("/bill")));
    auto r = billed.read_response(10000);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 503);
    EXPECT_TRUE(r->has_header("Retry-After: 1\r\n")) << r->head;
    EXPECT_NE(r->body.find("cannot be recorded"), std::string::npos) << r->body;
    EXPECT_GE(n.write_errors.load(), 2u);
    EXPECT_TRUE(billed.wait_closed(5000));
    EXPECT_EQ(testing::total(
                  s.srv, [](const core_stats& st) -> auto& { return st.journal_held; }),
              0u);
    client c(s.srv.port());
    ASSERT_TRUE(c.send_all(get("/free")));
    auto f = c.read_response(2000);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->body, "free");
  }
  ::close(ffd);
}

TEST_P(net_journal_test, a_short_write_holds_the_response_until_the_rest_is_on_file) {
  // Verifies that a write that lands only part of a record (the file size limit cuts it: a
  // short write, then EFBIG) sends nothing, that the rest is written, not the whole record
  // again, once the limit is lifted, and that only then the response arrives.
  TOLLGATE_SKIP_WITHOUT_RING();
  const std::string path = temp_path("short");
  std::atomic<int> fd{open_fresh_journal(path)};
  ASSERT_GE(fd.load(), 0);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  rlimit cut = old;
  cut.rlim_cur = kRecord / 2;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &cut), 0);
  journal_counters n;
  {
    started s(options(), &fd, &n);
    ASSERT_TRUE(s.ok);
    client c(s.srv.port());
    send_and_expect_held(c, n, 1, EFBIG);
    EXPECT_EQ(file_size(path), kRecord / 2);  // half a record: nothing may be sent
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    auto r = c.read_response(10000);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(parse_u64(r->body), kRecord);
    EXPECT_EQ(file_size(path), kRecord);  // the rest once, not the record twice
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  ::close(fd.load());
  ::unlink(path.c_str());
}

TEST_P(net_journal_test, sends_at_once_when_the_handler_journals_nothing) {
  // Verifies that a pass with no journal bytes releases responses without a journal write.
  TOLLGATE_SKIP_WITHOUT_RING();
  server srv(options());
  ASSERT_TRUE(srv.start(testing::echo_factory()).has_value());
  client c(srv.port());
  ASSERT_TRUE(c.send_all(get("/plain")));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "/plain|");
  EXPECT_EQ(testing::total(
                srv, [](const core_stats& st) -> auto& { return st.journal_writes; }),
            0u);
}

}  // namespace
}  // namespace tollgate::net
