// engine_runner: the private parts of the load generator's engine (engine.h): a connection's
// state and the runner that drives one thread's ring. Its members are defined by concern:
//   engine.cc       the loop (run), the end-of-run figures (finish), construction
//   engine_ring.cc  ring set-up and feature fallbacks, provided buffers, TCP_INFO counts, waits
//   engine_conn.cc  connections (connect, close, retry) and requests (issue, flush, send)
//   engine_recv.cc  completions: connect, send and recv results, framing, checks, tallies
// Thread-local: one runner per load thread.
#pragma once

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine.h"

struct ssl_st;
struct bio_st;

namespace tollgate::loadgen::detail {

enum op : std::uint8_t { op_connect = 1, op_recv = 2, op_send = 3 };

inline std::uint64_t pack(std::uint32_t conn, op o) { return (std::uint64_t{conn} << 8) | o; }

/// A request sent (or queued) and not yet answered.
struct pending_req {
  std::uint64_t t0 = 0;  ///< intended (open loop) or queued (closed loop) send time
  std::int64_t id = 0;
  std::uint32_t spec = 0;
};

/// One client connection. Core-local.
struct connection {
  enum class state : std::uint8_t { down, connecting, open, closing };
  int fd = -1;
  state st = state::down;
  std::uint8_t sqes = 0;  ///< SQEs in flight that name this connection
  bool send_busy = false;
  bool dirty = false;    ///< on the flush list
  bool in_free = false;  ///< on the open-loop free list
  bool retry_later = false;
  std::uint64_t retry_at = 0;
  std::string out_q;
  std::string out_fly;
  std::size_t fly_off = 0;
  std::vector<char> in;
  std::size_t in_len = 0;
  response_parser parser;
  std::vector<pending_req> fifo;  ///< ring of capacity depth
  std::size_t fifo_head = 0;
  std::size_t fifo_count = 0;
  // TLS (engine_tls.cc): null `ssl` for plain HTTP. out_q holds plaintext, out_fly ciphertext.
  ssl_st* ssl = nullptr;
  bio_st* net_in = nullptr;   ///< ciphertext received, for OpenSSL to read
  bio_st* net_out = nullptr;  ///< ciphertext OpenSSL wrote, to send
  bool tls_ready = false;     ///< handshake done: requests may be encrypted and sent
  std::vector<char> tls_in;   ///< recv buffer when there is no provided buffer ring
};

/// The errno constant's name, for transport-error tallies.
const char* errno_name(int e);

/// Drives one load thread: its connections on its own ring until the end time (engine.cc's
/// header numbers a connection's life). Thread-local.
class runner {
 public:
  runner(const run_config& cfg, const workload& w, const run_times& t, unsigned index,
         unsigned nconns, thread_stats& out);
  ~runner();
  void run();

 private:
  bool setup_ring();

  // --- TCP segment counts (TCP_INFO): what the client's sockets sent in the window ----------

  /// Adds (sign +1) or subtracts (-1) socket `fd`'s segment counters to the window's totals.
  void add_tcp_counts(int fd, int sign);

  /// The window starts: what sockets open now sent during the warm-up is taken off (their
  /// counters are added back when they close or at the end).
  void start_tcp_window();
  void note(const std::string& why);

  /// Multishot recv into a provided buffer ring (Linux 6.0+), registered by hand (liburing 2.3
  /// has no io_uring_setup_buf_ring). Without it, recv falls back to one SQE per read into the
  /// connection's own buffer. Returns 0 or a negative errno.
  int setup_buf_ring();

  /// Responses one wait asks for: 1 in open loop (sends are due at set times), else
  /// cfg_.wait_batch or, for auto, an eighth of the requests outstanding, at most
  /// `batch_cap_` (which shrinks when waits time out, so a slow server is not polled).
  unsigned wait_batch() const;
  void adapt_batch(bool timed_out);
  static void cap_wait(__kernel_timespec& ts, std::uint64_t max_ns);

  /// Points `s` at connection `i`'s socket: its slot in the registered table, or its fd.
  void target(io_uring_sqe* s, std::uint32_t i) const {
    if (fixed_) {
      s->fd = static_cast<int>(i);
      s->flags |= IOSQE_FIXED_FILE;
    }
  }

  void recycle_buffer(unsigned bid) {
    io_uring_buf_ring_add(br_, bufs_ + static_cast<std::size_t>(bid) * buf_size, buf_size,
                          static_cast<unsigned short>(bid), io_uring_buf_ring_mask(buf_count), 0);
    io_uring_buf_ring_advance(br_, 1);
  }

  io_uring_sqe* sqe() {
    io_uring_sqe* s = io_uring_get_sqe(&ring_);
    while (s == nullptr) {
      io_uring_submit(&ring_);
      s = io_uring_get_sqe(&ring_);
    }
    return s;
  }

  bool in_window(std::uint64_t now) const { return now >= t_.measure && now < t_.end; }

  __kernel_timespec wait_time(std::uint64_t now) const;

  // --- connections -------------------------------------------------------------------------

  void start_due_connects(std::uint64_t now);
  bool start_connect(std::uint32_t i, std::uint64_t now);
  void arm_recv(std::uint32_t i);

  /// Starts closing: outstanding requests are lost (counted as `why` unless null and none
  /// are outstanding); the connection comes back once no SQE refers to it.
  void begin_close(std::uint32_t i, const char* why, std::uint64_t now, bool backoff);
  void maybe_finish_close(std::uint32_t i, std::uint64_t now);

  // --- requests ----------------------------------------------------------------------------

  void issue(std::uint32_t i, std::uint64_t t0);
  void issue_due(std::uint64_t now);
  bool pop_free(std::uint32_t& out);
  void push_free(std::uint32_t i);
  void flush();
  void submit_send(std::uint32_t i);

  // --- TLS over memory BIOs (engine_tls.cc) --------------------------------------------------

  /// After the connect: a new SSL in client mode, its ClientHello queued. False = closing.
  bool tls_begin(std::uint32_t i, std::uint64_t now);
  /// Ciphertext received: advances the handshake, decrypts what it can onto c.in. False =
  /// closing.
  bool tls_feed(std::uint32_t i, const char* p, std::size_t n, std::uint64_t now);
  /// Encrypts the queued requests (once the handshake is done) and sends the pending
  /// ciphertext (handshake messages included) with one send.
  void tls_flush(std::uint32_t i);
  /// Whether OpenSSL holds ciphertext not yet sent.
  static bool tls_pending(const connection& c);
  static void tls_end(connection& c);
  void mark_dirty(std::uint32_t i) {
    if (!conns_[i].dirty) {
      conns_[i].dirty = true;
      dirty_.push_back(i);
    }
  }

  // --- completions -------------------------------------------------------------------------

  void handle(std::uint64_t data, int res, unsigned flags, std::uint64_t now);
  void on_connect(std::uint32_t i, int res, std::uint64_t now);
  static const char* connect_reason(int e);
  void on_send(std::uint32_t i, int res, std::uint64_t now);
  void on_recv(std::uint32_t i, int res, bool more, const char* buf, std::uint64_t now);
  static void append_in(connection& c, const char* p, std::size_t n);

  /// Frames, checks and records every complete response in data[0, len); `used` is the bytes
  /// they took (the rest starts an incomplete response). False when the connection started
  /// closing.
  bool frame_responses(std::uint32_t i, const char* data, std::size_t len, bool eof,
                       std::uint64_t now, std::size_t& used);

  /// Pops the oldest outstanding request and records its outcome and latency.
  void record(connection& c, const outcome& o, std::string_view body, std::uint64_t now);
  void count_transport(const char* why, std::uint64_t now, std::uint64_t n);
  void count_bad(const char* why, std::uint64_t now);
  void finish();
  const run_config& cfg_;
  const workload& w_;
  const run_times& t_;
  thread_stats& out_;
  picker pick_;
  response_checker checker_;
  std::vector<connection> conns_;
  std::vector<std::uint32_t> down_;
  std::vector<std::uint32_t> dirty_;
  std::vector<std::uint32_t> free_;
  std::string body_tmp_;
  io_uring ring_{};
  bool ring_ok_ = false;
  static constexpr unsigned buf_count = 256;  ///< provided buffers (a power of two)
  static constexpr unsigned buf_size = 16 * 1024;
  static constexpr unsigned short buf_group = 1;
  io_uring_buf_ring* br_ = nullptr;
  std::size_t br_bytes_ = 0;
  char* bufs_ = nullptr;  ///< buf_count * buf_size bytes, mmap'ed
  std::size_t bufs_bytes_ = 0;
  bool congestion_refused_ = false;
  bool tcp_window_started_ = false;  ///< the sockets' warm-up segment counts were taken off
  bool fixed_ = false;  ///< sockets live in the registered file table, slot = connection index
  std::uint64_t inflight_ = 0;      ///< requests sent or queued, not yet answered
  unsigned sends_unsubmitted_ = 0;  ///< send SQEs since the last submit
  static constexpr unsigned max_auto_batch = 16;
  unsigned batch_cap_ = max_auto_batch;
  bool open_loop_ = false;
  double interval_ns_ = 0;
  double next_due_ = 0;
  std::int64_t next_id_ = 0;
};

}  // namespace tollgate::loadgen::detail
