// The seam between the network engine (net/) and everything that answers requests.
//
// The engine owns sockets, rings and buffers; for each complete request it calls the core's
// handler, which writes exactly one complete HTTP/1.1 response (status line, headers, body)
// into the connection's output buffer. Handlers are core-local: the engine makes one per core
// with a factory and calls it only from that core's thread, so a handler may keep per-core
// state (parsers, scratch buffers, quota ledgers) without locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "tollgate/common/buffer.h"
#include "tollgate/http/request.h"

namespace tollgate::http {

/// What the handler tells the engine about the response it wrote.
struct response_info {
  int status = 200;
  bool close = false;     ///< close the connection once this response is sent
  bool deferred = false;  ///< handle() called engine_io::defer() and wrote nothing (see below)
  /// The response depends on durable bytes the handler buffered while answering it (e.g. a
  /// billed call's usage record): the engine sends it only once durable_pending()'s write
  /// covering it has completed. Responses without it never wait for a durable write.
  bool durable = false;
};

/// A deferred request: its connection slot and a number naming the request (a stale token, whose
/// connection closed or whose request was answered meanwhile, is recognised and ignored).
struct deferral_token {
  uint32_t slot = UINT32_MAX;
  uint32_t gen = 0;
};

/// The completion of engine_io::fetch().
struct upstream_reply {
  /// 0, or -errno: -ETIMEDOUT (deadline passed), -ECONNREFUSED / -ECONNRESET / -EPIPE (peer),
  /// -EPROTO (malformed or oversized response), -EAGAIN (too many connections to that upstream),
  /// -ECANCELED (engine stopping), -EINVAL (unknown upstream id, non-numeric address, empty
  /// request), -EMFILE etc. (no socket).
  int error = 0;
  int status = 0;         ///< HTTP status when error == 0
  std::string_view body;  ///< valid only during on_upstream(); followed by >= 64 readable bytes
};

/// What the engine offers the handler of its core beyond handle(): deferring a request until
/// outbound work is done, and outbound HTTP/1.1 requests on the core's own ring (no threads).
/// Core-local: call only from the core's thread (inside handle(), on_upstream(), on_tick()...).
class engine_io {
 public:
  virtual ~engine_io() = default;

  /// Only inside handle(): the request being handled is kept (its bytes stay with the
  /// connection, later pipelined requests wait behind it) and delivered to handle() again, byte
  /// for byte, after resume(). handle() must then write nothing and return {.deferred = true}.
  virtual deferral_token defer() = 0;
  /// The token of the request handle() is answering now (also on a re-delivery), so the handler
  /// can recognise a re-delivered request.
  virtual deferral_token current() const = 0;
  /// Delivers the deferred request again in this or the next loop pass. False (and nothing
  /// happens) when its connection has closed meanwhile. After true the request is delivered
  /// unless the engine must close the connection first (a failed send to the client, or
  /// server::stop()'s shutdown_timeout).
  virtual bool resume(deferral_token t) = 0;

  /// Registers an upstream: a numeric IPv4 or IPv6 address and a port. Returns its id (0, 1,
  /// ...). Call from attach() only.
  virtual uint32_t add_upstream(std::string_view host, uint16_t port) = 0;
  /// Sends `request` (one complete HTTP/1.1 request; copied) to upstream `u` on an idle
  /// keep-alive connection, or a new one. Exactly one on_upstream(tag, ...) follows, never
  /// from inside fetch() itself, at the latest at `deadline_mono_ns` (CLOCK_MONOTONIC):
  /// -ETIMEDOUT, and that connection is closed. The response is framed by Content-Length.
  virtual void fetch(uint32_t u, std::string_view request, uint64_t tag,
                     int64_t deadline_mono_ns) = 0;
  /// CLOCK_MONOTONIC, read once per loop pass.
  virtual int64_t now_mono() const = 0;

  /// Appends `len` bytes at `data` to file `fd` with an io_uring write (at the file's position:
  /// O_APPEND files, pipes, ttys). `data` must stay valid and unchanged until
  /// handler::on_file_written(tag, res) reports the bytes written (a short count is possible)
  /// or -errno. False: not supported here (nothing happens; write it yourself).
  virtual bool write_file(int /*fd*/, const char* /*data*/, size_t /*len*/, uint32_t /*tag*/) {
    return false;
  }
  /// Reads `len` bytes of the regular file `fd` at offset `at` with an io_uring read into a
  /// buffer of the engine's own, and drops them: they are then in the page cache, where a read
  /// that must not wait finds them (a story's text for get_story). At most read_ahead_max bytes
  /// from `at` are read per call. handler::on_read_ahead(tag, res) reports the bytes read or
  /// -errno. False: not supported here (nothing happens).
  virtual bool read_ahead(int /*fd*/, uint64_t /*at*/, size_t /*len*/, uint32_t /*tag*/) {
    return false;
  }
  static constexpr size_t read_ahead_max = size_t{1} << 20;
  /// A thread-safe, non-blocking wake-up of this core (an eventfd write): after it, the core's
  /// next loop pass calls handler::on_wake(). For work done by another thread that parked
  /// requests wait on (the cluster agent's leases). Empty: not supported here.
  virtual std::function<void()> waker() { return {}; }
  /// Asks for a handler::on_wake() call at or soon after `mono_ns` (CLOCK_MONOTONIC): a bound on
  /// a parked request's wait. The earliest time asked for since the last on_wake() wins.
  virtual void wake_at(int64_t /*mono_ns*/) {}

  /// Only inside handle(): the peer address of the request's connection as text ("1.2.3.4:5",
  /// "[::1]:5"), written to `buf`; returns its length (0: unknown).
  virtual size_t peer_address(char* /*buf*/, size_t /*cap*/) { return 0; }
  /// Only inside handle(): the TLS protocol of the request's connection ("TLSv1.3"), or empty
  /// for plain HTTP. The view is static text.
  virtual std::string_view tls_version() { return {}; }
};

/// Durable bytes a handler wants written before the responses that depend on them go out (the
/// app's per-core usage journal). `data` stays valid and unchanged until durable_written() is
/// called.
struct durable_batch {
  int fd = -1;  ///< append-only file (O_APPEND); -1: nothing to write
  const char* data = nullptr;
  size_t size = 0;
  bool sync_due = false;  ///< the handler wants an fdatasync of `fd` (every fsync_ms)
  /// The handler gave up on the bytes of earlier batches not yet written (their writes kept
  /// failing) and takes back what their answers billed: the engine must not send the held
  /// `durable` responses; it answers each connection holding any with 503 + Retry-After
  /// ("usage cannot be recorded") instead, and closes it.
  bool dropped = false;
};

class handler {
 public:
  virtual ~handler() = default;
  /// Writes one complete response for `req` to `out` (append only). `now_ns` is CLOCK_REALTIME
  /// read once per loop pass. Must not block.
  virtual response_info handle(const request& req, out_buffer& out, int64_t now_ns) = 0;
  /// A request whose head carries `Expect: 100-continue` and whose body has not arrived: the
  /// handler may answer it from the head alone (a refusal the body cannot change: a bad key,
  /// a forbidden Origin, no such route) by writing one complete response to `out` and returning
  /// its info, so the client is never invited to send a body that would be refused (RFC 9110
  /// §10.1.1). Returning status 0 with nothing written lets the engine send 100 Continue and
  /// wait for the body; handle() then gets the whole request. `head.body` is empty and
  /// `head.keep_alive` is false: an answered connection closes after the response (the client
  /// may already be sending the body; the engine reads and drops it until the client's FIN or
  /// the linger timeout, so the client reads the response rather than a reset). Must not
  /// defer.
  virtual response_info answer_before_body(const request& /*head*/, out_buffer& /*out*/,
                                           int64_t /*now_ns*/) {
    return {0, false, false};
  }
  /// A request the parser refused after reading its head (today: `e` = body_too_large, a
  /// Content-Length or chunked body over limits::max_body_bytes): `head` holds its method and
  /// target and the fields read so far (`path` may still be empty: the size can be refused
  /// while the fields are read), and no body. The handler may write one complete response of its
  /// own to `out` (a route whose errors have a body format of their own, as /mcp's JSON-RPC errors)
  /// and return true; the response must say `Connection: close`, as the engine closes the
  /// connection after it (the rest of the body is not read). False, with nothing written: the
  /// engine writes its plain-text refusal. Must not defer.
  virtual bool answer_refused(const request& /*head*/, errc /*e*/, out_buffer& /*out*/) {
    return false;
  }
  /// Called once per loop pass after all requests of the pass were handled and before the
  /// engine submits their sends: durable state (usage journals) is written here.
  virtual void before_send(int64_t /*now_ns*/) {}
  /// Engine-written durable bytes (optional): called once per pass after before_send() while
  /// no durable write is in flight. A batch with size > 0 makes the engine write it and hold
  /// every `durable` response answered since (and the ones not yet covered, and whatever
  /// follows one of them on its connection) until the write completes; durable_written() then
  /// reports the bytes written (a short count: the rest is asked for again) or -errno (nothing
  /// counted: the bytes stay with the handler). A handler that returns an empty batch keeps the
  /// default behaviour (responses go out this pass).
  virtual durable_batch durable_pending() { return {}; }
  /// Completion of the write of the last batch: `res` bytes written, or -errno.
  virtual void durable_written(int64_t /*res*/) {}
  /// Completion of an fdatasync requested by durable_batch::sync_due: 0 or -errno.
  virtual void durable_synced(int /*res*/) {}
  /// Called about every 100 ms on each core (reconciliation, reloads, session expiry).
  virtual void on_tick(int64_t /*now_ns*/) {}
  /// Called once on the core's thread before any request, with the core's engine services.
  virtual void attach(engine_io& /*io*/) {}
  /// The completion of engine_io::fetch(tag).
  virtual void on_upstream(uint64_t /*tag*/, const upstream_reply& /*reply*/) {}
  /// After engine_io::waker() was called from any thread, or engine_io::wake_at()'s time came:
  /// on the core's thread, before the pass delivers resumed requests (so a resume() here is
  /// delivered in the same pass). May be called spuriously.
  virtual void on_wake(int64_t /*now_ns*/) {}
  /// The completion of engine_io::write_file(tag): bytes written or -errno.
  virtual void on_file_written(uint32_t /*tag*/, int64_t /*res*/) {}
  /// The completion of engine_io::read_ahead(tag): bytes read or -errno.
  virtual void on_read_ahead(uint32_t /*tag*/, int64_t /*res*/) {}
};

}  // namespace tollgate::http
