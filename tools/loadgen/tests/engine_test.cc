// The io_uring engine (engine*.cc) end to end against a small poll() server on 127.0.0.1: closed
// and open loops, reconnects, refused connections, split responses, every ring feature subset,
// setup fallbacks.
#include "engine.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "stats.h"
#include "tool_result.h"
#include "workload.h"

namespace tollgate::loadgen {
namespace {

using test::tool_result;

/// A single-threaded poll() HTTP server on 127.0.0.1:0 that answers each request with
/// `answer(request_body)`. Stops within ~20 ms of stop().
class tiny_server {
 public:
  using answer_fn = std::function<std::string(const std::string& body)>;

  /// `piece` > 0 writes each batch of answers in pieces of that many bytes, 1 ms apart, so
  /// responses arrive split across reads.
  explicit tiny_server(answer_fn answer, std::size_t piece = 0)
      : answer_(std::move(answer)), piece_(piece) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    ::setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    EXPECT_EQ(::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(lfd_, 128), 0);
    socklen_t len = sizeof addr_;
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&addr_), &len);
    thread_ = std::thread([this] { loop(); });
  }
  ~tiny_server() {
    stop_ = true;
    thread_.join();
    ::close(lfd_);
  }
  const sockaddr_in& addr() const { return addr_; }
  int accepted() const { return accepted_.load(); }

 private:
  void loop() {
    std::map<int, std::string> in;
    while (!stop_) {
      std::vector<pollfd> fds{{lfd_, POLLIN, 0}};
      for (auto& [fd, _] : in) {
        fds.push_back({fd, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) {
        continue;
      }
      if (fds[0].revents & POLLIN) {
        int c = ::accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          in[c];
          accepted_++;
        }
      }
      for (std::size_t i = 1; i < fds.size(); i++) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
          continue;
        }
        int fd = fds[i].fd;
        char buf[65536];
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) {
          ::close(fd);
          in.erase(fd);
          continue;
        }
        std::string& b = in[fd];
        b.append(buf, static_cast<std::size_t>(n));
        std::string out;
        bool close = false;
        for (;;) {
          std::size_t end = b.find("\r\n\r\n");
          if (end == std::string::npos) {
            break;
          }
          std::size_t cl = 0;
          std::size_t p = b.find("Content-Length: ");
          if (p != std::string::npos && p < end) {
            cl = std::stoul(b.substr(p + 16));
          }
          if (b.size() < end + 4 + cl) {
            break;
          }
          std::string resp = answer_(b.substr(end + 4, cl));
          close |= resp.find("Connection: close") != std::string::npos;
          out += resp;
          b.erase(0, end + 4 + cl);
        }
        if (!out.empty() && piece_ == 0) {
          ssize_t w = ::write(fd, out.data(), out.size());
          (void)w;
        } else {
          for (std::size_t at = 0; at < out.size(); at += piece_) {
            std::size_t len = out.size() - at < piece_ ? out.size() - at : piece_;
            ssize_t w = ::send(fd, out.data() + at, len, MSG_NOSIGNAL);
            (void)w;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }
        if (close) {
          ::close(fd);
          in.erase(fd);
        }
      }
    }
    for (auto& [fd, _] : in) {
      ::close(fd);
    }
  }

  answer_fn answer_;
  std::size_t piece_ = 0;
  int lfd_ = -1;
  sockaddr_in addr_{};
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

std::int64_t id_of(const std::string& body) {
  std::size_t p = body.find("\"id\":");
  return p == std::string::npos ? -1 : std::stoll(body.substr(p + 5));
}

std::string json_response(const std::string& json, const char* extra = "") {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + std::string(extra) +
         "Content-Length: " + std::to_string(json.size()) + "\r\n\r\n" + json;
}

/// Runs one load thread against `srv` with `conns` connections and `depth` until `stop_after`
/// outcomes were counted (the 20 s end time is only a safety net), or, with stop_after 0,
/// for `window_ms`.
thread_stats run_against(const tiny_server& srv, unsigned conns, unsigned depth,
                         std::uint64_t stop_after, double rate = 0, std::uint64_t window_ms = 0,
                         run_config cfg = {}) {
  std::memcpy(&cfg.addr, &srv.addr(), sizeof(sockaddr_in));
  cfg.addr_len = sizeof(sockaddr_in);
  cfg.connections = conns;
  cfg.depth = depth;
  cfg.rate = rate;
  cfg.stop_after = stop_after;
  workload_config wc;
  wc.keys = {"k"};
  request_spec s;
  std::string err;
  EXPECT_TRUE(parse_request_spec("call", s, err));
  wc.mix = {s};
  workload w;
  EXPECT_TRUE(w.build(wc, err)) << err;
  run_times t;
  t.begin = now_ns();
  t.measure = t.begin;
  t.end = t.measure + (window_ms > 0 ? window_ms * 1'000'000 : 20'000'000'000ull);
  thread_stats st;
  run_thread(cfg, w, t, 0, conns, st);
  EXPECT_TRUE(st.fatal.empty()) << st.fatal;
  return st;
}

const std::string kPayload = R"({\"total\":1,\"stories\":[{\"id\":\"1\"}]})";

TEST(loadgen_engine_test, closed_loop_pipelined_all_ok) {
  // Verifies a correct server gets only successes, with 4 connections pipelining 8 deep, and
  // that latency samples match the responses counted.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  thread_stats st = run_against(srv, 4, 8, 400);
  EXPECT_GE(st.responses, 400u);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_EQ(st.outcomes.errors(), 0u);
  EXPECT_EQ(st.latency.count(), st.responses);
}

TEST(loadgen_engine_test, wrong_ids_are_never_successes) {
  // Verifies a server that answers with the wrong id yields only id-mismatch errors.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body) + 1, false, kPayload));
  });
  thread_stats st = run_against(srv, 2, 1, 50);
  EXPECT_GE(st.responses, 50u);
  EXPECT_EQ(st.outcomes.ok(), 0u);
  ASSERT_EQ(st.outcomes.rows().size(), 1u);
  EXPECT_EQ(st.outcomes.rows()[0].detail, "id mismatch");
}

TEST(loadgen_engine_test, connection_close_reconnects) {
  // Verifies `Connection: close` answers are all counted as successes and the engine
  // reconnects for the next request.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload), "Connection: close\r\n");
  });
  thread_stats st = run_against(srv, 2, 1, 50);
  EXPECT_GE(st.responses, 50u);
  EXPECT_EQ(st.outcomes.errors(), 0u);
  EXPECT_GT(st.connects, 10u);
  EXPECT_GT(srv.accepted(), 10);
}

TEST(loadgen_engine_test, open_loop_sends_at_the_rate) {
  // Verifies an open-loop run at 2000 req/s never sends ahead of its schedule: 500 ms of
  // schedule hold at most 1000 requests, where a closed loop would send many more.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  thread_stats st = run_against(srv, 4, 1, 0, 2000, 500);
  EXPECT_GT(st.responses, 0u);
  EXPECT_LE(st.responses, 1000u);
  EXPECT_EQ(st.outcomes.errors(), 0u);
}

TEST(loadgen_engine_test, refused_connections_are_transport_errors) {
  // Verifies that with nothing listening, the run reports connect errors and no success.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);  // the port is now (very likely) closed
  run_config cfg;
  std::memcpy(&cfg.addr, &a, sizeof a);
  cfg.addr_len = sizeof a;
  cfg.connections = 2;
  workload_config wc;
  wc.mix = {request_spec{}};
  wc.mix[0].path = "/";
  workload w;
  std::string err;
  ASSERT_TRUE(w.build(wc, err));
  cfg.stop_after = 4;
  run_times t;
  t.begin = now_ns();
  t.measure = t.begin;
  t.end = t.begin + 20'000'000'000ull;  // safety net: stop_after ends it
  thread_stats st;
  run_thread(cfg, w, t, 0, 2, st);
  EXPECT_EQ(st.outcomes.ok(), 0u);
  ASSERT_FALSE(st.outcomes.rows().empty());
  EXPECT_EQ(st.outcomes.rows()[0].kind, outcome_kind::transport);
  EXPECT_GE(st.outcomes.errors(), 4u);
}

TEST(loadgen_engine_test, responses_split_across_reads_are_framed) {
  // Verifies responses that arrive a few bytes at a time (each read ends mid-response, so the
  // tail is kept between reads) are all framed and checked as successes.
  tiny_server srv(
      [](const std::string& body) {
        return json_response(tool_result(id_of(body), false, kPayload));
      },
      7);
  thread_stats st = run_against(srv, 2, 2, 20);
  EXPECT_GE(st.responses, 20u);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_EQ(st.outcomes.errors(), 0u);
}

TEST(loadgen_engine_test, every_feature_subset_gives_the_same_outcomes) {
  // Verifies the engine is correct with each optional io_uring feature turned off (plain
  // ring, no registered files, one recv per read), so a kernel without them still works.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  for (unsigned f :
       {0u, unsigned{feat_coop_taskrun}, unsigned{feat_defer_taskrun},
        feat_all & ~unsigned{feat_fixed_files}, feat_all & ~unsigned{feat_buf_ring},
        feat_all & ~unsigned{feat_ring_fd}, unsigned{feat_ring_fd}, unsigned{feat_all}}) {
    run_config cfg;
    cfg.features = f;
    thread_stats st = run_against(srv, 3, 2, 60, 0, 0, cfg);
    EXPECT_GE(st.responses, 60u) << ring_feature_names(f);
    EXPECT_EQ(st.outcomes.ok(), st.responses) << ring_feature_names(f);
    EXPECT_EQ(st.features & ~f, 0u) << "uses a feature it was told not to";
    EXPECT_TRUE(st.ring_note.empty()) << st.ring_note;
  }
}

TEST(loadgen_engine_test, wait_batch_settings_all_complete) {
  // Verifies the auto wait batch, waking for every completion and a fixed batch larger than
  // the requests outstanding all finish with only successes (a batch never waits for answers
  // that cannot come).
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  for (unsigned b : {0u, 1u, 64u}) {
    run_config cfg;
    cfg.wait_batch = b;
    thread_stats st = run_against(srv, 4, 1, 100, 0, 0, cfg);
    EXPECT_GE(st.responses, 100u) << b;
    EXPECT_EQ(st.outcomes.ok(), st.responses) << b;
  }
}

TEST(loadgen_engine_test, tcp_segments_count_only_the_window) {
  // Verifies the TCP_INFO segment counts cover the measured window only: after a warm-up,
  // a closed loop at depth 1 (each small request is one data segment) sent as many data
  // segments as responses, give or take the one request per connection in flight at each
  // edge of the window. Counting the warm-up too would add about half again.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  run_config cfg;
  std::memcpy(&cfg.addr, &srv.addr(), sizeof(sockaddr_in));
  cfg.addr_len = sizeof(sockaddr_in);
  cfg.connections = 2;
  workload_config wc;
  wc.keys = {"k"};
  request_spec s;
  std::string err;
  ASSERT_TRUE(parse_request_spec("call", s, err));
  wc.mix = {s};
  workload w;
  ASSERT_TRUE(w.build(wc, err)) << err;
  run_times t;
  t.begin = now_ns();
  t.measure = t.begin + 200'000'000ull;
  t.end = t.measure + 400'000'000ull;
  thread_stats st;
  run_thread(cfg, w, t, 0, cfg.connections, st);
  ASSERT_TRUE(st.fatal.empty()) << st.fatal;
  ASSERT_GE(st.responses, 100u);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_GE(st.tcp_data_segs_out + cfg.connections, st.responses);
  EXPECT_LE(st.tcp_data_segs_out, st.responses + cfg.connections);
  EXPECT_GE(st.tcp_segs_out, st.tcp_data_segs_out);
}

int refuse_defer(unsigned entries, io_uring* ring, io_uring_params* p) {
  if ((p->flags & IORING_SETUP_DEFER_TASKRUN) != 0) {
    return -EINVAL;
  }
  return io_uring_queue_init_params(entries, ring, p);
}

int refuse_taskrun_flags(unsigned entries, io_uring* ring, io_uring_params* p) {
  if ((p->flags & (IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN)) != 0) {
    return -EINVAL;
  }
  return io_uring_queue_init_params(entries, ring, p);
}

int refuse_everything(unsigned, io_uring*, io_uring_params*) { return -ENOSYS; }

TEST(loadgen_engine_test, refused_setup_flags_fall_back_with_a_note) {
  // Verifies a kernel that refuses DEFER_TASKRUN gets COOP_TASKRUN, one that refuses both
  // gets a plain ring, each run still all successes, and the note names what was refused.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  run_config cfg;
  cfg.ring_init = &refuse_defer;
  thread_stats st = run_against(srv, 2, 1, 30, 0, 0, cfg);
  EXPECT_EQ(st.features & (feat_defer_taskrun | feat_coop_taskrun), unsigned{feat_coop_taskrun});
  EXPECT_NE(st.ring_note.find("DEFER_TASKRUN refused"), std::string::npos) << st.ring_note;
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_GE(st.responses, 30u);

  cfg.ring_init = &refuse_taskrun_flags;
  st = run_against(srv, 2, 1, 30, 0, 0, cfg);
  EXPECT_EQ(st.features & (feat_defer_taskrun | feat_coop_taskrun), 0u);
  EXPECT_NE(st.ring_note.find("COOP_TASKRUN refused"), std::string::npos) << st.ring_note;
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_GE(st.responses, 30u);
}

TEST(loadgen_engine_test, unknown_congestion_control_keeps_the_default_with_a_note) {
  // Verifies a TCP congestion control the kernel does not know is noted once and the run
  // goes on with the system default.
  tiny_server srv([](const std::string& body) {
    return json_response(tool_result(id_of(body), false, kPayload));
  });
  run_config cfg;
  cfg.congestion = "no_such_cc";
  thread_stats st = run_against(srv, 2, 1, 20, 0, 0, cfg);
  EXPECT_NE(st.ring_note.find("TCP_CONGESTION no_such_cc refused"), std::string::npos)
      << st.ring_note;
  EXPECT_EQ(st.ring_note.find("TCP_CONGESTION", st.ring_note.find("TCP_CONGESTION") + 1),
            std::string::npos);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_GE(st.responses, 20u);
}

TEST(loadgen_engine_test, a_ring_that_cannot_be_created_is_fatal) {
  // Verifies that when io_uring itself is unavailable the thread reports a fatal message
  // saying so, instead of running without a ring.
  run_config cfg;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::memcpy(&cfg.addr, &a, sizeof a);
  cfg.addr_len = sizeof a;
  cfg.ring_init = &refuse_everything;
  workload_config wc;
  wc.mix = {request_spec{}};
  wc.mix[0].path = "/";
  workload w;
  std::string err;
  ASSERT_TRUE(w.build(wc, err));
  run_times t;
  t.begin = now_ns();
  t.measure = t.begin;
  t.end = t.begin + 1'000'000'000ull;
  thread_stats st;
  run_thread(cfg, w, t, 0, 1, st);
  EXPECT_NE(st.fatal.find("io_uring_queue_init"), std::string::npos) << st.fatal;
  EXPECT_EQ(st.outcomes.ok(), 0u);
}

TEST(loadgen_ring_features_test, names_round_trip) {
  // Verifies feature lists parse into bits and print back, and unknown names are refused.
  unsigned f = 0;
  ASSERT_TRUE(parse_ring_features("fixed_files,defer_taskrun", f));
  EXPECT_EQ(f, unsigned{feat_fixed_files | feat_defer_taskrun});
  EXPECT_EQ(ring_feature_names(f), "defer_taskrun+fixed_files");
  ASSERT_TRUE(parse_ring_features("ring_fd,buf_ring", f));
  EXPECT_EQ(f, unsigned{feat_ring_fd | feat_buf_ring});
  EXPECT_EQ(ring_feature_names(f), "buf_ring+ring_fd");
  ASSERT_TRUE(parse_ring_features("all", f));
  EXPECT_EQ(f, unsigned{feat_all});
  ASSERT_TRUE(parse_ring_features("none", f));
  EXPECT_EQ(f, 0u);
  EXPECT_EQ(ring_feature_names(0), "plain");
  EXPECT_FALSE(parse_ring_features("defer_taskrun,sqpoll", f));
  EXPECT_FALSE(parse_ring_features("", f));
}

}  // namespace
}  // namespace tollgate::loadgen
