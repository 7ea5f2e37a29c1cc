// One core of the engine: its ring, provided buffer ring, connection slot pool and event loop.
// Shard-local: every member is touched only by the core's own thread, except wake_fd() (written
// by server::stop() from any thread) and the stop flag it reads.
//
// Loop pass, in order:
//   1. io_uring_submit_and_wait_timeout(): the pass's one submit (SQEs queued by the previous
//      pass) and the wait for at least one CQE or the next 100 ms tick.
//   2. Reap every CQE: accepts open slots, receives are parsed in place and answered by the
//      handler into the connection's output buffer, send completions advance or finish.
//   3. On a tick: handler::on_tick(), then expire the header, idle and linger timer lists.
//   4. handler::before_send(), then the journal step (below), then queue one send per
//      connection with output the journal step released.
//   5. Re-arm or cancel accept (cap, back-off, drain) and hand consumed buffers back.
//
// Journal step (durability before sending): when no journal write is in flight, the handler's
// journal_pending() batch (the bytes billed so far) is queued as one IORING_OP_WRITE in this
// pass's submit, and every response answered so far and not yet sent is held: each held
// connection records how much of its output the write covers (`mark`). The write's CQE releases
// exactly those bytes (`ready`), and they are sent in that pass's submit. An empty batch releases
// everything at once (nothing answered is unbilled on disk), so handlers that journal nothing
// cost nothing. See journal_step() in core.cc for why the sends are held instead of linked.
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/common/result.h"
#include "tollgate/http/handler.h"
#include "tollgate/http/request.h"
#include "tollgate/net/features.h"
#include "tollgate/net/server.h"

namespace tollgate::net::detail {

/// Spare bytes after every receive buffer and reassembly buffer (SIMDJSON_PADDING), so bodies
/// can be parsed in place by simdjson.
inline constexpr size_t kPadding = 64;

struct conn;

class core {
 public:
  core(int index, const server_options& opts, const features& feat, int listen_fd,
       std::unique_ptr<http::handler> handler, core_stats& stats, const std::atomic<bool>& stop);
  ~core();
  core(const core&) = delete;
  core& operator=(const core&) = delete;

  /// The eventfd that server::stop() writes to wake this core.
  int wake_fd() const noexcept { return wake_fd_; }
  /// Creates the ring, the buffer ring and the slot pool. Must run on the core's thread (the
  /// ring's single issuer).
  result<void, std::string> setup();
  /// The event loop; returns once stop was requested and every connection has closed.
  void run();

 private:
  enum class op : uint8_t { accept = 1, recv, send, wake, cancel, journal_write, journal_sync };
  static constexpr uint32_t kNil = UINT32_MAX;

  io_uring_sqe* get_sqe();
  uint64_t conn_data(op kind, uint32_t idx) const noexcept;

  void on_cqe(const io_uring_cqe& cqe);
  void on_accept(const io_uring_cqe& cqe);
  void on_wake(const io_uring_cqe& cqe);
  void on_recv(conn& c, uint32_t idx, const io_uring_cqe& cqe);
  void on_send(conn& c, uint32_t idx, int res);

  void open_conn(int fd);
  void on_data(conn& c, uint32_t idx, char* data, size_t n);
  size_t process(conn& c, uint32_t idx, char* buf, size_t len, bool& completed);
  void append_in(conn& c, const char* p, size_t n);
  void pause_input(conn& c, uint32_t idx);
  bool wants_input(const conn& c) const noexcept;
  void update_timer(conn& c, uint32_t idx, bool completed);

  void arm_recv(conn& c, uint32_t idx);
  void arm_accept();
  void arm_wake();
  void cancel(uint64_t user_data);
  void maybe_arm_accept();
  void mark_dirty(conn& c, uint32_t idx);
  void flush_sends();
  void journal_step();
  void hold(conn& c, uint32_t idx);
  void release_all_held();
  void on_journal_write(int res);
  void on_journal_sync(int res);
  void finish_journal();
  void submit_send(conn& c, uint32_t idx);
  void return_buffer(uint16_t bid);

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
  std::vector<uint32_t> held_;     // slots with output waiting for the journal (held_listed)
  bool journal_inflight_ = false;  // an IORING_OP_WRITE of a handler batch is in flight
  size_t journal_size_ = 0;        // bytes of that batch
  bool journal_partial_ = false;   // the last write was short or failed: its rest comes next
  bool sync_inflight_ = false;     // an IORING_OP_FSYNC (datasync) is in flight
  int64_t journal_retry_at_ = 0;   // after a failed write: no new write before this (monotonic)
  int64_t journal_backoff_ns_ = 0;
  uint32_t open_ = 0;

  struct list {
    uint32_t head = kNil;
    uint32_t tail = kNil;
  };
  list lists_[3];                  // header, idle, linger: each FIFO = sorted by deadline
  int64_t timeout_ns_[3] = {};

  bool accept_armed_ = false;
  bool accept_cancel_pending_ = false;
  int64_t accept_resume_at_ = 0;
  int64_t accept_backoff_ns_ = 0;
  bool wake_armed_ = false;
  bool draining_ = false;
  int64_t drain_deadline_ = 0;

  int64_t now_mono_ = 0;
  int64_t now_real_ = 0;
  int64_t next_tick_ = 0;
  size_t max_in_ = 0;
  http::request req_;
};

}  // namespace tollgate::net::detail
