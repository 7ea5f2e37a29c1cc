// One core of the engine: its ring, provided buffer ring, connection slot pool, outbound
// upstream connections and event loop. Core-local: every member is touched only by the core's
// own thread, except wake_fd() (written by server::stop() from any thread) and the stop flag it
// reads. The core is also its handler's http::engine_io (deferred requests, fetch()).
//
// Loop pass, in order:
//   1. io_uring_submit_and_wait_timeout(): the pass's one submit (SQEs queued by the previous
//      pass) and the wait for at least one CQE, the next 100 ms tick or the earliest fetch
//      deadline, whichever comes first; while resumes or replies are queued (or a deadline has
//      come) no wait at all: io_uring_submit_and_get_events(), which skips the wait path.
//   2. Reap every CQE: accepts open slots, receives are parsed in place and answered by the
//      handler into the connection's output buffer, send completions advance or finish;
//      upstream connect/send/recv completions advance their fetch, and a finished fetch calls
//      handler::on_upstream() right here (which may call resume(): only queued, see 4).
//   3. Upstream replies queued by fetch() itself (immediate failures: -EAGAIN, -ETIMEDOUT, ...)
//      are delivered, then fetches whose deadline passed get -ETIMEDOUT (their connection closes).
//   4. stop() seen: begin the drain. Then every request resume()d so far is delivered again to
//      handle() (never from inside resume()); resumes made during this step wait for the next
//      pass. After an answered re-delivery the connection's later pipelined requests go on.
//   5. On a tick: handler::on_tick(), then expire the header, idle and linger timer lists, and
//      close upstream connections idle for 30 s.
//   6. handler::before_send(), then the durable step (below), then queue one send per
//      connection with output the durable step released.
//   7. Re-arm or cancel accept (cap, back-off, drain) and hand consumed buffers back.
// After the loop (every client connection closed): fetches still in flight get -ECANCELED.
//
// Deferred requests (engine_io::defer): handle() keeps the request; its bytes (and any pipelined
// bytes after it) stay at the front of the slot's reassembly buffer `in`, the parsed request is
// kept (rebased onto `in`, since a chunked body was decoded in place and cannot be parsed
// twice), nothing further of the connection is parsed, and it sits on no timer list (the
// handler resumes it within its own deadline). Its receive stays armed: the peer's FIN (a
// half-close) keeps it, and it and the complete requests pipelined behind it are answered
// before the connection closes (see finish_after_fin() in core_recv.cc); a reset or receive error
// closes it (resume() then returns false) unless a resume is already queued, in which case the
// request is delivered first and the connection closes after its answer.
//
// Durable step (durability before sending): when no durable write is in flight, the handler's
// durable_pending() batch (for the app: the usage records billed so far) is written, and every
// response answered so far and not yet sent is held: each held connection records how much of its
// output the write covers (`mark`). A successful write releases exactly those bytes (`ready`).
// Inline (server_options::journal_inline, the default) the batch is written with write(2) in the
// step itself, so the bytes go out in this pass's submit; otherwise it is one IORING_OP_WRITE
// in this pass's submit, and its CQE releases the bytes into that pass's. An empty batch releases
// everything at once (nothing answered waits for bytes not yet on disk), so handlers that write
// nothing durable cost nothing. See core_durable.cc for why the sends are held, not linked.
#pragma once

#include <liburing.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "net/handoff.h"
#include "net/upstream.h"
#include "tollgate/common/buffer.h"
#include "tollgate/common/result.h"
#include "tollgate/http/handler.h"
#include "tollgate/http/request.h"
#include "tollgate/net/features.h"
#include "tollgate/net/server.h"
#include "tollgate/net/tls.h"

namespace tollgate::net::detail {

/// Spare bytes after every receive buffer and reassembly buffer (SIMDJSON_PADDING), so bodies
/// can be parsed in place by simdjson.
inline constexpr size_t kPadding = 64;

struct conn;

class core final : public http::engine_io {
 public:
  core(int index, const server_options& opts, const features& feat, int listen_fd,
       std::unique_ptr<http::handler> handler, core_stats& stats, const std::atomic<bool>& stop,
       handoff& hand);
  ~core();
  core(const core&) = delete;
  core& operator=(const core&) = delete;

  // http::engine_io (see handler.h).
  http::deferral_token defer() override;
  http::deferral_token current() const override;
  bool resume(http::deferral_token t) override;
  uint32_t add_upstream(std::string_view host, uint16_t port) override;
  void fetch(uint32_t u, std::string_view request, uint64_t tag, int64_t deadline_mono_ns) override;
  int64_t now_mono() const override { return now_mono_; }
  bool write_file(int fd, const char* data, size_t len, uint32_t tag) override;
  bool read_ahead(int fd, uint64_t at, size_t len, uint32_t tag) override;
  size_t peer_address(char* buf, size_t cap) override;
  std::function<void()> waker() override;
  void wake_at(int64_t mono_ns) override {
    handler_wake_at_ = mono_ns < handler_wake_at_ ? mono_ns : handler_wake_at_;
  }

  std::string_view tls_version() override;

  /// Gives this core its HTTPS listener (before setup(); opts.tls is set).
  void set_tls_listener(int fd) noexcept { tls_listen_fd_ = fd; }
  /// The eventfd that server::stop() writes to wake this core.
  int wake_fd() const noexcept { return wake_fd_; }
  /// Creates the ring, the buffer ring and the slot pool. Must run on the core's thread (the
  /// ring's single issuer).
  result<void, std::string> setup();
  /// The event loop; returns once stop was requested and every connection has closed.
  void run();

 private:
  enum class op : uint8_t {
    accept = 1,
    recv,
    send,
    wake,
    cancel,
    durable_write,
    durable_sync,
    up_connect,
    up_send,
    up_recv,     // upstream connection operations (upstream.cc)
    file_write,  // engine_io::write_file (the access log)
    read_ahead,  // engine_io::read_ahead (a story's text into the page cache)
    accept_tls,  // the HTTPS listener (core_tls.cc)
  };
  static constexpr uint32_t kNil = UINT32_MAX;

  result<void, std::string> setup_ring();
  result<void, std::string> setup_buffer_ring();
  void setup_slots();
  bool wait();  // the pass's submit and wait (loop step 1); false: the ring failed
  void reap();  // loop step 2

  io_uring_sqe* get_sqe();
  uint64_t conn_data(op kind, uint32_t idx) const noexcept;
  uint32_t conn_gen(uint32_t idx) const noexcept;
  int conn_fd(uint32_t idx) const noexcept;
  size_t conn_slots() const noexcept;

  void on_cqe(const io_uring_cqe& cqe);
  void on_accept(const io_uring_cqe& cqe);
  void on_wake(const io_uring_cqe& cqe);
  void on_recv(conn& c, uint32_t idx, const io_uring_cqe& cqe);
  void on_send(conn& c, uint32_t idx, int res);

  void open_conn(int fd, bool tls = false);
  void place_conn(int fd, bool tls = false);
  void refuse_conn(int fd);
  void take_handoffs();
  void refuse_backlog();
  void on_data(conn& c, uint32_t idx, char* data, size_t n);
  size_t process(conn& c, uint32_t idx, char* buf, size_t len, bool& completed);
  void process_in(conn& c, uint32_t idx, bool& completed);
  void after_input(conn& c, uint32_t idx, bool completed);
  bool answer_before_body(conn& c, uint32_t idx);
  void append_in(conn& c, const char* p, size_t n);
  void pause_input(conn& c, uint32_t idx);
  bool wants_input(const conn& c) const noexcept;
  void finish_after_fin(conn& c, uint32_t idx);
  void update_timer(conn& c, uint32_t idx, bool completed);

  void arm_recv(conn& c, uint32_t idx);
  void arm_accept();
  void arm_wake();
  /// Loop step: handler::on_wake() when a waker() was called or wake_at()'s time came.
  void maybe_wake_handler();
  void cancel(uint64_t user_data);
  void maybe_arm_accept();
  void mark_dirty(conn& c, uint32_t idx);
  void flush_sends();
  void durable_step();
  bool durable_step_once();  // true: an inline write was short but made progress
  void hold(conn& c, uint32_t idx);
  bool hold_if_durable(conn& c, uint32_t idx);
  void refuse_held();
  void release_all_held();
  void on_durable_write(int res);
  void on_durable_sync(int res);
  void finish_durable();
  void send_released(conn& c, uint32_t idx);
  void submit_send(conn& c, uint32_t idx);
  void return_buffer(uint16_t bid);

  // Deferred requests.
  http::response_info call_handler(conn& c, uint32_t idx, const http::request& req);
  void save_deferred(conn& c, const char* start, size_t len);
  void free_saved(conn& c);
  void process_resumes();
  void redeliver(uint32_t idx);

  // Upstreams (upstream.cc).
  uint64_t up_data(op kind, uint32_t idx) const noexcept;
  void on_up_cqe(op kind, const io_uring_cqe& cqe);
  int open_up(uint32_t u, uint32_t& idx);
  void start_fetch(uint32_t idx, uint64_t tag, int64_t deadline, bool reused, bool retried);
  void submit_up_send(uint32_t idx);
  void arm_up_recv(uint32_t idx);
  void on_up_data(uint32_t idx);
  void up_failed(uint32_t idx, int err);
  void fail_fetch(uint32_t idx, int err);
  void deliver_response(uint32_t idx, size_t body_len);
  void close_up(uint32_t idx);
  void release_up(uint32_t idx);
  void queue_reply(uint64_t tag, int error);
  void deliver_queued_replies();
  void expire_fetches();
  void sweep_idle_upstreams();
  void teardown_upstreams();
  void heap_push(uint32_t idx);
  void heap_remove(uint32_t idx);
  void heap_sift(uint32_t pos);
  void heap_set(uint32_t pos, uint32_t idx);

  // TLS (core_tls.cc).
  void arm_tls_accept();
  void on_tls_accept(const io_uring_cqe& cqe);
  bool tls_open(conn& c);
  void tls_input(conn& c, uint32_t idx, const char* data, size_t n);
  void tls_drive(conn& c, uint32_t idx);
  void tls_fail(conn& c, uint32_t idx, tls_failure why);
  void tls_flush(conn& c, uint32_t idx);
  void hand_tx_to_kernel(conn& c);
  void tls_release(conn& c);
  void run_handshake_queue();

  void hard_close(conn& c, uint32_t idx);
  void graceful_close(conn& c, uint32_t idx);
  void maybe_release(conn& c, uint32_t idx);

  void link(uint32_t idx, uint8_t list);
  void unlink(uint32_t idx);
  void tick();
  void begin_drain();
  bool done() const noexcept;
  void read_clocks() noexcept;

  int index_;
  const server_options& opts_;
  const features& feat_;
  int listen_fd_;
  std::unique_ptr<http::handler> handler_;
  core_stats& stats_;
  const std::atomic<bool>& stop_;
  int wake_fd_ = -1;
  uint64_t wake_buf_ = 0;
  handoff& handoff_;                // connections passed between cores at their caps (handoff.h)
  std::vector<int> handed_;         // the descriptors taken from it this pass
  int fd_ceiling_ = INT32_MAX;      // accepted descriptors at or above it: 503 (fd_reserve)
  int fd_single_from_ = INT32_MAX;  // accepted descriptors at or above it: single-shot accepts
  int spare_fd_ = -1;  // given up to accept (and refuse) one connection when the table is full

  io_uring ring_{};
  bool ring_ok_ = false;
  bool multishot_recv_ = false;
  bool multishot_accept_ = false;

  // Provided buffer ring (group 0 of this core's ring): entries at br_, payloads at bufs_, each
  // stride_ bytes apart (payload + kPadding, rounded to 64).
  io_uring_buf_ring* br_ = nullptr;
  size_t br_bytes_ = 0;
  char* bufs_ = nullptr;
  size_t bufs_bytes_ = 0;
  size_t stride_ = 0;
  int br_mask_ = 0;
  int br_pending_ = 0;
  bool br_registered_ = false;

  std::vector<conn> conns_;        // the slot pool, sized max_connections at setup
  std::vector<uint32_t> free_;     // free slot indices (stack)
  std::vector<uint32_t> dirty_;    // slots with output to send at the end of this pass
  std::vector<uint32_t> held_;     // slots with output waiting for a durable write (held_listed)
  bool durable_inflight_ = false;  // an IORING_OP_WRITE of a handler batch is in flight
  size_t durable_size_ = 0;        // bytes of that batch
  bool durable_partial_ = false;   // the last write was short or failed: its rest comes next
  bool sync_inflight_ = false;     // an IORING_OP_FSYNC (datasync) is in flight
  int64_t durable_retry_at_ = 0;   // after a failed write: no new write before this (monotonic)
  int64_t durable_backoff_ns_ = 0;
  uint32_t open_ = 0;

  struct list {
    uint32_t head = kNil;
    uint32_t tail = kNil;
  };
  list lists_[3];  // header, idle, linger: each FIFO = sorted by deadline
  int64_t timeout_ns_[3] = {};

  bool accept_armed_ = false;
  bool accept_single_ = false;  // single-shot accepts while descriptors are near fd_reserve
  bool accept_cancel_pending_ = false;
  int64_t accept_resume_at_ = 0;
  int64_t accept_backoff_ns_ = 0;
  bool wake_armed_ = false;
  // handler::on_wake: asked for by another thread (waker(): the flag, then the eventfd), or at
  // a time (wake_at()). The wakers share `remote_wake_`, which owns a duplicate of the eventfd:
  // a waker called after this core is gone writes to a live (unread) eventfd, never to a
  // descriptor number reused meanwhile.
  struct remote_wake {
    std::atomic<bool> flag{false};
    int fd = -1;
    ~remote_wake();
  };
  std::shared_ptr<remote_wake> remote_wake_;
  int64_t handler_wake_at_ = INT64_MAX;
  bool draining_ = false;
  int64_t drain_deadline_ = 0;

  int64_t now_mono_ = 0;
  int64_t now_real_ = 0;
  int64_t next_tick_ = 0;
  size_t max_in_ = 0;
  http::request req_;

  // Deferred requests.
  struct saved_request {
    http::request req;   // views into the request's bytes, which start at `base`
    uintptr_t base = 0;  // an address only (the bytes may have moved since); see rebase()
    size_t len = 0;      // the request's bytes on the wire
  };
  uint32_t cur_idx_ = kNil;    // the slot whose request handle() is answering now
  bool defer_called_ = false;  // defer() was called during that handle()
  uint32_t next_req_id_ = 1;   // identifies a request in its deferral_token
  std::vector<std::unique_ptr<saved_request>> saved_;  // pool; capacity kept
  std::vector<uint32_t> saved_free_;
  std::vector<uint32_t> resumed_;       // slots resume()d, delivered in the next resume step
  std::vector<uint32_t> resumed_work_;  // the batch being delivered

  // Upstreams.
  struct queued_reply {
    uint64_t tag;
    int error;
  };
  std::deque<upstream> upstreams_;  // grows only in attach(); elements never move
  std::vector<up_conn> up_conns_;   // reserved at attach(): grows only past the caps
  std::vector<uint32_t> up_free_;
  std::vector<uint32_t> heap_;         // fetches in flight, a min-heap by deadline
  std::vector<queued_reply> replies_;  // failures found inside fetch(), delivered later
  std::vector<queued_reply> replies_work_;
  out_buffer retry_req_;      // a request moving to a fresh connection
  uint32_t file_writes_ = 0;  // engine_io::write_file operations in flight
  uint32_t read_aheads_ = 0;  // engine_io::read_ahead operations in flight
  // Where read_ahead's reads land (read_ahead_max bytes, made at the first): their bytes are
  // never looked at, so reads in flight together share it.
  std::unique_ptr<char[]> read_sink_;
  struct peer_text {  // a connection's peer address, read once when first asked
    uint32_t gen = UINT32_MAX;
    uint8_t len = 0;
    char text[55];
  };
  std::vector<peer_text> peers_;  // by slot
  uint32_t up_ops_ = 0;           // upstream operations in flight
  bool attached_ = false;         // attach() returned: add_upstream() is closed
  bool tearing_down_ = false;     // the loop ended: fetch() fails with -ECANCELED

  // TLS (core_tls.cc). Handshake steps are CPU-heavy (a full one is an ECDHE + a signature):
  // at most kHandshakeBudget run per pass; the rest wait in hs_wait_ (FIFO) for the next pass,
  // which does not sleep while it is non-empty.
  int tls_listen_fd_ = -1;
  bool tls_accept_armed_ = false;
  bool tls_accept_cancel_pending_ = false;
  int hs_budget_ = 0;
  struct hs_entry {
    uint32_t idx;
    uint32_t gen;
  };
  std::vector<hs_entry> hs_wait_;
  std::vector<hs_entry> hs_work_;
  std::vector<char> tls_plain_;       // SSL_read's plaintext, parsed in place (+ kPadding)
  bool ktls_refusal_logged_ = false;  // the first kernel refusal of a handover was logged
};

}  // namespace tollgate::net::detail
