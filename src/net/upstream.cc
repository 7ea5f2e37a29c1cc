// The engine's outbound HTTP/1.1 client: core's engine_io::add_upstream()/fetch() and the ring
// work behind them (see upstream.h for a fetch's life, core.h for where it sits in the pass).
//
// Kernel features: IORING_OP_CONNECT (5.5), send/recv, async cancel; nothing beyond what the
// engine already needs. Receives use each connection's own buffer, not the provided ring: a
// response is read until Content-Length is satisfied, and its buffer keeps its capacity.
#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "net/core.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"
#include "tollgate/http/response_head.h"

namespace tollgate::net::detail {
namespace {

constexpr size_t kRecvChunk = 16 * 1024;
constexpr size_t kRecvMax = 4 * 1024 * 1024;
/// Buffers of an idle or released connection above this are freed (a rare huge response).
constexpr size_t kKeepUpCapacity = 4 * 1024 * 1024;

void shrink(out_buffer& b) {
  b.clear();
  if (b.capacity() > kKeepUpCapacity) {
    b = out_buffer();
  }
}

}  // namespace

head_status parse_response_head(std::string_view buf, size_t& scan, response_head& out) noexcept {
  if (scan > buf.size()) {
    scan = 0;
  }
  const void* hit = ::memmem(buf.data() + scan, buf.size() - scan, "\r\n\r\n", 4);
  if (hit == nullptr) {
    if (buf.size() > kMaxUpstreamHead) {
      return head_status::bad;
    }
    scan = buf.size() >= 3 ? buf.size() - 3 : 0;
    return head_status::incomplete;
  }
  const size_t head_len = static_cast<size_t>(static_cast<const char*>(hit) - buf.data()) + 4;
  if (head_len > kMaxUpstreamHead) {
    return head_status::bad;
  }
  out = response_head{};
  out.head_len = head_len;
  http::response_fields f;
  // Every line of the head ends in CRLF: the block is the head without its empty line.
  if (http::parse_response_fields(buf.substr(0, head_len - 2), f) !=
          http::response_head_error::none ||
      (f.has_length && f.content_length > kMaxUpstreamBody)) {
    return head_status::bad;
  }
  out.status = f.status;
  out.has_length = f.has_length;
  out.content_length = static_cast<size_t>(f.content_length);
  out.chunked = f.chunked || f.other_coding;
  out.close = f.close;
  return head_status::complete;
}

// ---- engine_io ----------------------------------------------------------------------------

uint32_t core::add_upstream(std::string_view host, uint16_t port) {
  TOLLGATE_ASSERT(!attached_ && "add_upstream() outside attach()");
  if (attached_) {
    log_error("core {}: add_upstream({}:{}) after attach(); ignored", index_, host, port);
    return UINT32_MAX;  // fetch() answers -EINVAL
  }
  const auto id = static_cast<uint32_t>(upstreams_.size());
  upstream& up = upstreams_.emplace_back();
  up.name = fmt::format("{}:{}", host, port);
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  sockaddr_in a4{};
  sockaddr_in6 a6{};
  if (::inet_pton(AF_INET, h.c_str(), &a4.sin_addr) == 1) {
    a4.sin_family = AF_INET;
    a4.sin_port = htons(port);
    std::memcpy(&up.addr, &a4, sizeof a4);
    up.addr_len = sizeof a4;
  } else if (::inet_pton(AF_INET6, h.c_str(), &a6.sin6_addr) == 1) {
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons(port);
    std::memcpy(&up.addr, &a6, sizeof a6);
    up.addr_len = sizeof a6;
  } else {
    log_error(
        "core {}: upstream {} is not a numeric IPv4/IPv6 address; its fetches fail "
        "with EINVAL",
        index_, up.name);
  }
  return id;
}

void core::fetch(uint32_t u, std::string_view request, uint64_t tag, int64_t deadline_mono_ns) {
  if (tearing_down_) {
    queue_reply(tag, -ECANCELED);
    return;
  }
  if (u >= upstreams_.size() || request.empty()) {
    queue_reply(tag, -EINVAL);
    return;
  }
  if (deadline_mono_ns <= now_mono_) {
    queue_reply(tag, -ETIMEDOUT);
    return;
  }
  upstream& up = upstreams_[u];
  uint32_t idx = 0;
  bool reused = false;
  if (!up.idle.empty()) {
    idx = up.idle.back();  // the most recently used: the likeliest to be still open
    up.idle.pop_back();
    reused = true;
  } else if (const int rc = open_up(u, idx); rc < 0) {
    queue_reply(tag, rc);
    return;
  }
  up_conn& uc = up_conns_[idx];
  uc.req.clear();
  uc.req.append(request);
  start_fetch(idx, tag, deadline_mono_ns, reused, false);
}

// ---- connections --------------------------------------------------------------------------

uint64_t core::up_data(op kind, uint32_t idx) const noexcept {
  return (uint64_t{static_cast<uint8_t>(kind)} << 56) |
         (uint64_t{up_conns_[idx].gen & 0xffffff} << 32) | idx;
}

// Opens a connection to upstream `u` (its connect is queued); 0 or -errno.
int core::open_up(uint32_t u, uint32_t& idx) {
  upstream& up = upstreams_[u];
  if (up.addr_len == 0) {
    return -EINVAL;
  }
  if (up.live >= kMaxUpstreamConns) {
    return -EAGAIN;
  }
  const int fd = ::socket(up.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return -errno;  // EMFILE, ENFILE, ENOBUFS
  }
  if (fd >= fd_ceiling_) {
    ::close(fd);
    return -EMFILE;  // a descriptor reserved for the rest of the process (fd_reserve)
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (!up_free_.empty()) {
    idx = up_free_.back();
    up_free_.pop_back();
  } else {
    idx = static_cast<uint32_t>(up_conns_.size());
    up_conns_.emplace_back();  // within the capacity reserved at attach() unless closing
  }                            // connections linger past the cap
  up_conn& uc = up_conns_[idx];
  uc.fd = fd;
  uc.upstream = u;
  uc.state = up_state::connecting;
  uc.has_fetch = false;
  uc.heap_pos = UINT32_MAX;
  ++up.live;
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_connect(sqe, fd, reinterpret_cast<const sockaddr*>(&up.addr), up.addr_len);
  io_uring_sqe_set_data64(sqe, up_data(op::up_connect, idx));
  uc.op_inflight = true;
  uc.op_kind = static_cast<uint8_t>(op::up_connect);
  ++up_ops_;
  return 0;
}

void core::start_fetch(uint32_t idx, uint64_t tag, int64_t deadline, bool reused, bool retried) {
  up_conn& uc = up_conns_[idx];
  uc.has_fetch = true;
  uc.tag = tag;
  uc.deadline = deadline;
  uc.reused = reused;
  uc.retried = retried;
  uc.head_done = false;
  uc.close_after = false;
  uc.status = 0;
  uc.sent = 0;
  uc.scan = 0;
  uc.head_len = 0;
  uc.total = 0;
  uc.resp.clear();
  heap_push(idx);
  if (uc.state == up_state::idle) {
    uc.state = up_state::sending;
    submit_up_send(idx);
  }
  // connecting: the send follows the connect's CQE.
}

void core::submit_up_send(uint32_t idx) {
  up_conn& uc = up_conns_[idx];
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_send(sqe, uc.fd, uc.req.data() + uc.sent, uc.req.size() - uc.sent, MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, up_data(op::up_send, idx));
  uc.op_inflight = true;
  uc.op_kind = static_cast<uint8_t>(op::up_send);
  ++up_ops_;
}

void core::arm_up_recv(uint32_t idx) {
  up_conn& uc = up_conns_[idx];
  size_t want = kRecvChunk;
  if (uc.head_done && uc.total - uc.resp.size() > want) {
    want = std::min(uc.total - uc.resp.size(), kRecvMax);
  }
  char* p = uc.resp.prepare(want + kPadding);  // kPadding spare bytes stay after the data
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_recv(sqe, uc.fd, p, want, 0);
  io_uring_sqe_set_data64(sqe, up_data(op::up_recv, idx));
  uc.op_inflight = true;
  uc.op_kind = static_cast<uint8_t>(op::up_recv);
  uc.state = up_state::receiving;
  ++up_ops_;
}

void core::on_up_cqe(op kind, const io_uring_cqe& cqe) {
  const auto idx = static_cast<uint32_t>(cqe.user_data);
  const auto gen = static_cast<uint32_t>((cqe.user_data >> 32) & 0xffffff);
  if (idx >= up_conns_.size() || (up_conns_[idx].gen & 0xffffff) != gen ||
      !up_conns_[idx].op_inflight) {
    TOLLGATE_ASSERT(false && "completion for a released upstream connection");
    return;
  }
  up_conn& uc = up_conns_[idx];
  uc.op_inflight = false;
  --up_ops_;
  if (uc.state == up_state::closing) {
    release_up(idx);
    return;
  }
  const int res = cqe.res;
  switch (kind) {
    case op::up_connect:
      if (res < 0) {
        up_failed(idx, res);  // ECONNREFUSED, ENETUNREACH, ETIMEDOUT (SYN retries) ...
        return;
      }
      uc.state = up_state::sending;
      submit_up_send(idx);
      return;
    case op::up_send:
      if (res <= 0) {
        up_failed(idx, res == 0 ? -EPIPE : res);
        return;
      }
      uc.sent += static_cast<size_t>(res);
      if (uc.sent < uc.req.size()) {
        submit_up_send(idx);  // short send: the rest
      } else {
        arm_up_recv(idx);
      }
      return;
    case op::up_recv:
      if (res <= 0) {
        up_failed(idx, res);  // 0: EOF
        return;
      }
      uc.resp.commit(static_cast<size_t>(res));
      on_up_data(idx);
      return;
    default:
      TOLLGATE_ASSERT(false && "not an upstream operation");
      return;
  }
}

// The response so far is in `resp`: finish the head, then wait for Content-Length bytes.
void core::on_up_data(uint32_t idx) {
  up_conn& uc = up_conns_[idx];
  while (!uc.head_done) {
    response_head h;
    const head_status st = parse_response_head(uc.resp.view(), uc.scan, h);
    if (st == head_status::incomplete) {
      arm_up_recv(idx);
      return;
    }
    if (st == head_status::bad || h.status == 101 || h.status < 100) {
      fail_fetch(idx, -EPROTO);
      return;
    }
    if (h.status < 200) {
      uc.resp.consume(h.head_len);  // an interim response (100 Continue): the final one follows
      uc.scan = 0;
      continue;
    }
    const bool head_request = uc.req.view().substr(0, 5) == "HEAD ";
    size_t body = 0;
    if (!(h.status == 204 || h.status == 304 || head_request)) {
      if (h.chunked || !h.has_length) {
        fail_fetch(idx, -EPROTO);  // only Content-Length framing is spoken
        return;
      }
      body = h.content_length;
    }
    uc.head_done = true;
    uc.status = h.status;
    uc.head_len = h.head_len;
    uc.total = h.head_len + body;
    uc.close_after = h.close;
    uc.resp.reserve(uc.total + kPadding);
  }
  if (uc.resp.size() < uc.total) {
    arm_up_recv(idx);
    return;
  }
  if (uc.resp.size() > uc.total) {
    uc.close_after = true;  // bytes nobody asked for: never read them as the next response
  }
  deliver_response(idx, uc.total - uc.head_len);
}

void core::deliver_response(uint32_t idx, size_t body_len) {
  up_conn& uc = up_conns_[idx];
  heap_remove(idx);
  uc.has_fetch = false;
  const uint64_t tag = uc.tag;
  const int status = uc.status;
  uc.resp.reserve(uc.total + kPadding);
  if (uc.resp.size() == uc.total) {
    std::memset(uc.resp.data() + uc.total, 0, kPadding);  // defined padding for simdjson
  }
  const std::string_view body(uc.resp.data() + uc.head_len, body_len);
  // The connection is in no idle list yet, so a fetch() from on_upstream() cannot take it (and
  // overwrite `body`); up_conns_ may grow meanwhile, so it is looked up again after.
  handler_->on_upstream(tag, http::upstream_reply{0, status, body});
  up_conn& done = up_conns_[idx];
  if (done.close_after || tearing_down_) {
    close_up(idx);
    return;
  }
  done.state = up_state::idle;
  done.idle_since = now_mono_;
  done.reused = true;
  shrink(done.resp);
  shrink(done.req);
  upstreams_[done.upstream].idle.push_back(idx);
}

// A connect, send or receive failed (err = -errno, or 0 for EOF).
void core::up_failed(uint32_t idx, int err) {
  up_conn& uc = up_conns_[idx];
  const bool idle_close = err == 0 || err == -ECONNRESET || err == -EPIPE;
  if (uc.has_fetch && uc.reused && !uc.retried && uc.resp.empty() && idle_close) {
    // The peer closed this keep-alive connection while it was idle: once more, on a new one.
    const uint32_t u = uc.upstream;
    const uint64_t tag = uc.tag;
    const int64_t deadline = uc.deadline;
    heap_remove(idx);
    uc.has_fetch = false;
    std::swap(retry_req_, uc.req);
    close_up(idx);
    uint32_t fresh = 0;
    if (const int rc = open_up(u, fresh); rc < 0) {
      handler_->on_upstream(tag, http::upstream_reply{rc, 0, {}});
      return;
    }
    std::swap(up_conns_[fresh].req, retry_req_);
    start_fetch(fresh, tag, deadline, false, true);
    return;
  }
  fail_fetch(idx, err == 0 ? -ECONNRESET : err);
}

// Closes the connection and delivers `err` for its fetch (if one is attached).
void core::fail_fetch(uint32_t idx, int err) {
  up_conn& uc = up_conns_[idx];
  const bool had = uc.has_fetch;
  const uint64_t tag = uc.tag;
  if (had) {
    heap_remove(idx);
    uc.has_fetch = false;
  }
  close_up(idx);
  if (had) {
    handler_->on_upstream(tag, http::upstream_reply{err, 0, {}});
  }
}

void core::close_up(uint32_t idx) {
  up_conn& uc = up_conns_[idx];
  if (uc.state == up_state::free || uc.state == up_state::closing) {
    return;
  }
  upstream& up = upstreams_[uc.upstream];
  if (uc.state == up_state::idle) {
    const auto it = std::find(up.idle.begin(), up.idle.end(), idx);
    if (it != up.idle.end()) {
      up.idle.erase(it);
    }
  }
  --up.live;
  uc.state = up_state::closing;
  if (uc.op_inflight) {
    // The operation completes (-ECANCELED, EOF or EPIPE); the slot is released on its CQE.
    ::shutdown(uc.fd, SHUT_RDWR);
    cancel(up_data(static_cast<op>(uc.op_kind), idx));
    return;
  }
  release_up(idx);
}

void core::release_up(uint32_t idx) {
  up_conn& uc = up_conns_[idx];
  TOLLGATE_ASSERT(!uc.op_inflight && !uc.has_fetch);
  ::close(uc.fd);
  uc.fd = -1;
  uc.state = up_state::free;
  ++uc.gen;
  uc.heap_pos = UINT32_MAX;
  shrink(uc.req);
  shrink(uc.resp);
  up_free_.push_back(idx);
}

// ---- replies queued by fetch(), deadlines, idle connections, teardown ---------------------

void core::queue_reply(uint64_t tag, int error) { replies_.push_back(queued_reply{tag, error}); }

void core::deliver_queued_replies() {
  if (replies_.empty()) {
    return;
  }
  std::swap(replies_, replies_work_);  // fetch() from on_upstream() queues for the next pass
  for (const queued_reply& r : replies_work_) {
    handler_->on_upstream(r.tag, http::upstream_reply{r.error, 0, {}});
  }
  replies_work_.clear();
}

void core::expire_fetches() {
  while (!heap_.empty() && up_conns_[heap_[0]].deadline <= now_mono_) {
    fail_fetch(heap_[0], -ETIMEDOUT);
  }
}

void core::sweep_idle_upstreams() {
  for (upstream& up : upstreams_) {
    // Oldest first: stop at the first one still young enough.
    while (!up.idle.empty() &&
           up_conns_[up.idle.front()].idle_since + kUpstreamIdleNs <= now_mono_) {
      close_up(up.idle.front());
    }
  }
}

// The loop has ended (every client connection is closed): fetches still in flight complete
// with -ECANCELED, fetch() from now on fails the same way, and every connection closes (the
// cancelled operations are reaped by finish_durable()).
void core::teardown_upstreams() {
  tearing_down_ = true;
  for (uint32_t idx = 0; idx < up_conns_.size(); ++idx) {
    if (up_conns_[idx].has_fetch) {
      fail_fetch(idx, -ECANCELED);
    }
  }
  for (uint32_t idx = 0; idx < up_conns_.size(); ++idx) {
    close_up(idx);
  }
  for (int i = 0; i < 100 && !replies_.empty(); ++i) {
    deliver_queued_replies();
  }
}

// ---- deadline heap (indices into up_conns_, keyed by deadline; positions in heap_pos) ------

void core::heap_set(uint32_t pos, uint32_t idx) {
  heap_[pos] = idx;
  up_conns_[idx].heap_pos = pos;
}

void core::heap_push(uint32_t idx) {
  heap_.push_back(idx);
  up_conns_[idx].heap_pos = static_cast<uint32_t>(heap_.size() - 1);
  heap_sift(static_cast<uint32_t>(heap_.size() - 1));
}

void core::heap_remove(uint32_t idx) {
  const uint32_t pos = up_conns_[idx].heap_pos;
  if (pos == UINT32_MAX) {
    return;
  }
  up_conns_[idx].heap_pos = UINT32_MAX;
  const uint32_t last = heap_.back();
  heap_.pop_back();
  if (pos < heap_.size()) {
    heap_set(pos, last);
    heap_sift(pos);
  }
}

void core::heap_sift(uint32_t pos) {
  const uint32_t idx = heap_[pos];
  const int64_t d = up_conns_[idx].deadline;
  while (pos > 0) {  // up
    const uint32_t parent = (pos - 1) / 2;
    if (up_conns_[heap_[parent]].deadline <= d) {
      break;
    }
    heap_set(pos, heap_[parent]);
    pos = parent;
  }
  const auto n = static_cast<uint32_t>(heap_.size());
  for (;;) {  // down
    uint32_t child = 2 * pos + 1;
    if (child >= n) {
      break;
    }
    if (child + 1 < n && up_conns_[heap_[child + 1]].deadline < up_conns_[heap_[child]].deadline) {
      ++child;
    }
    if (up_conns_[heap_[child]].deadline >= d) {
      break;
    }
    heap_set(pos, heap_[child]);
    pos = child;
  }
  heap_set(pos, idx);
}

}  // namespace tollgate::net::detail
