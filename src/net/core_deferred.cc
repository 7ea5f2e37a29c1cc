// Deferred requests (engine_io::defer/resume; see core.h): the request kept at the front of its
// slot's `in`, its parsed form saved and rebased, and its re-delivery to the handler.
#include <memory>
#include <string_view>
#include <utility>

#include "net/conn.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"

namespace tollgate::net::detail {

// ---- deferred requests --------------------------------------------------------------------

namespace {

constexpr std::string_view kInternalError =
    "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

// Moves a view that points into [from, from + len] to the same offset from `to`. `from` is only
// an address: the bytes may have moved (provided buffer -> `in`, or `in` reallocated).
void rebase(std::string_view& v, uintptr_t from, size_t len, const char* to) noexcept {
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  if (p >= from && p <= from + len) {
    v = std::string_view(to + (p - from), v.size());
  }
}

void rebase(http::request& r, uintptr_t from, size_t len, const char* to) noexcept {
  rebase(r.method, from, len, to);
  rebase(r.target, from, len, to);
  rebase(r.path, from, len, to);
  rebase(r.query, from, len, to);
  rebase(r.body, from, len, to);
  for (size_t i = 0; i < r.num_headers; ++i) {
    rebase(r.headers[i].name, from, len, to);
    rebase(r.headers[i].value, from, len, to);
  }
}

}  // namespace

http::deferral_token core::defer() {
  TOLLGATE_ASSERT(cur_idx_ != kNil && "defer() outside handle()");
  if (cur_idx_ == kNil) {
    return {};
  }
  defer_called_ = true;
  return {cur_idx_, conns_[cur_idx_].req_id};
}

http::deferral_token core::current() const {
  if (cur_idx_ == kNil) {
    return {};
  }
  return {cur_idx_, conns_[cur_idx_].req_id};
}

bool core::resume(http::deferral_token t) {
  if (t.slot >= conns_.size()) {
    return false;
  }
  conn& c = conns_[t.slot];
  if (c.state != conn_state::open || c.req_id != t.gen) {
    return false;
  }
  // Deferred, or deferring right now (resume() from inside its own handle(), after defer()).
  const bool deferring = t.slot == cur_idx_ && defer_called_;
  if (!c.deferred && !deferring) {
    return false;
  }
  if (!c.resume_queued) {
    c.resume_queued = true;
    resumed_.push_back(t.slot);
  }
  return true;
}

http::response_info core::call_handler(conn& c, uint32_t idx, const http::request& req) {
  cur_idx_ = idx;
  defer_called_ = false;
  const size_t out_before = c.out.size();
  http::response_info info = handler_->handle(req, c.out, now_real_);
  cur_idx_ = kNil;
  c.durable_wait = c.durable_wait || info.durable;
  if (info.deferred && defer_called_) {
    TOLLGATE_ASSERT(c.out.size() == out_before && "a deferring handle() wrote output");
    c.out.resize(out_before);  // (release builds) half a response must not go out
    return info;
  }
  c.resume_queued = false;  // resumed from inside handle() but answered after all
  if (info.deferred) {
    // Nothing could ever resume it (no token was taken): answer rather than hang.
    TOLLGATE_ASSERT(false && "handle() returned deferred without calling defer()");
    log_error("core {}: handler returned deferred without defer(); answering 500", index_);
    c.out.append(kInternalError);
    info = http::response_info{500, true, false};
  }
  return info;
}

void core::save_deferred(conn& c, const char* start, size_t len) {
  uint32_t s;
  if (!saved_free_.empty()) {
    s = saved_free_.back();
    saved_free_.pop_back();
  } else {
    s = static_cast<uint32_t>(saved_.size());
    saved_.push_back(std::make_unique<saved_request>());  // pool growth (warm-up) only
  }
  saved_request& sr = *saved_[s];
  sr.req = req_;
  sr.base = reinterpret_cast<uintptr_t>(start);
  sr.len = len;
  c.saved = s;
  c.deferred = true;
  c.need = 0;
  c.head_done = false;
}

void core::free_saved(conn& c) {
  if (c.saved != kNil) {
    saved_free_.push_back(c.saved);
    c.saved = kNil;
  }
}

// Delivers the requests resume()d so far. Resumes made meanwhile (by handle(), or on_upstream()
// of nothing: fetch() never completes inline) join the next pass's batch, so one pass can never
// loop on a handler that defers and resumes at once.
void core::process_resumes() {
  if (resumed_.empty()) {
    return;
  }
  std::swap(resumed_, resumed_work_);
  for (const uint32_t idx : resumed_work_) {
    redeliver(idx);
  }
  resumed_work_.clear();
}

void core::redeliver(uint32_t idx) {
  conn& c = conns_[idx];
  if (c.state != conn_state::open || !c.deferred || !c.resume_queued) {
    return;  // closed meanwhile (maybe reused), or listed twice
  }
  c.resume_queued = false;
  c.deferred = false;
  saved_request& sr = *saved_[c.saved];
  rebase(sr.req, sr.base, sr.len, c.in.data());  // the request is at the front of `in`
  sr.base = reinterpret_cast<uintptr_t>(c.in.data());
  if (draining_) {
    sr.req.keep_alive = false;
  }
  const http::response_info info = call_handler(c, idx, sr.req);
  if (info.deferred) {
    c.deferred = true;  // deferred again: same bytes, same saved request
    return;
  }
  const bool keep_alive = sr.req.keep_alive;
  const size_t len = sr.len;
  free_saved(c);
  c.in.consume(len);
  mark_dirty(c, idx);
  bool completed = true;
  if (info.close || !keep_alive || c.close_after_send) {
    c.close_after_send = true;
  } else if (c.out.size() >= kOutHighWater) {
    pause_input(c, idx);
  } else if (!c.in.empty()) {
    process_in(c, idx, completed);  // the requests pipelined behind it (one may defer in turn)
  }
  after_input(c, idx, completed);
  if (!c.recv_armed && wants_input(c) && !c.close_after_send) {
    arm_recv(c, idx);
  }
}

}  // namespace tollgate::net::detail
