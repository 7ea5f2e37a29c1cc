#include "core_host.h"

#include <chrono>

#include "tollgate/envelope/outcome_table.h"

namespace tollgate::app {
namespace {
int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void core_host::set_stdio(std::string secret) {
  stdio_ = true;
  stdio_secret_ = std::move(secret);
}

const quota::figures& core_host::figures_now() {
  if (stdio_) {
    now_ns_ = wall_ns();
    quota_filled_ = false;
  }
  if (!quota_filled_) {
    quota_.fill_quota(*key_, now_ns_, fig_);
    quota_filled_ = true;
  }
  return fig_;
}

void core_host::write_headers(out_buffer& out) {
  if (key_ == nullptr) {
    return;  // a keyless request has no figures of its own
  }
  quota::write_rate_headers(out, figures_now());
}

bool core_host::stdio_begin_call() {
  now_ns_ = wall_ns();
  if (now_ns_ - last_tick_ns_ >= 100'000'000) {
    quota_.on_tick(now_ns_);
    last_tick_ns_ = now_ns_;
  }
  // The key's record is looked up again on every call: the table it was in may have been
  // replaced since (a reload here, or by the tick above; a SIGHUP reload switches between
  // calls), and a revoked key has none.
  const quota::key_record* k = quota_.authenticate(stdio_secret_);
  if (k == nullptr) {
    return false;
  }
  key_ = k;
  quota_filled_ = false;
  return true;
}

mcp::admission core_host::admit(std::string_view /*tool*/, std::string_view id) {
  mcp::admission a;
  if (stdio_ && !stdio_begin_call()) {  // revoked while running: nothing more may be spent
    a.refusal = envelope::tool_error_code::suspended;
    return a;
  }
  // Abandoned calls (design §5): the client will not read the answer, so nothing is spent.
  if (terms_.deadline_ms > 0 && now_ns_ / 1'000'000 > terms_.deadline_ms) {
    a.refusal = envelope::tool_error_code::call_expired;
    a.retry_after_secs = 1;
    return a;
  }
  if (cancels_ != nullptr && cancels_->contains(key_->key_id, id, terms_.received_ns, now_ns_)) {
    a.refusal = envelope::tool_error_code::call_cancelled;
    return a;
  }
  if (stdio_) {  // a rate breach is a tool error there, not a 429
    if (quota_.check_rate(*key_, now_ns_, fig_) == quota::rate_verdict::limited) {
      a.refusal = envelope::tool_error_code::rate_limited;
      a.retry_after_secs = fig_.retry_after_secs;
      return a;
    }
  }
  // A batch entry after one that was billed in this delivery never waits: a re-delivery would
  // bill that one again. It is decided now (the outage rules when no units are held).
  quota::admit_verdict v =
      quota_.admit(*key_, now_ns_, fig_, ticket_, terms_.may_wait_lease && !billed_here_);
  quota_filled_ = true;  // admit() filled the quota part of fig_ from the same snapshot
  if (v == quota::admit_verdict::ok) {
    admitted_ = true;
    return a;
  }
  if (v == quota::admit_verdict::lease_pending) {
    // Cluster mode: the node is asking Redis for units. This delivery's answer is discarded
    // (as a search's that outlasts its slice); the handler parks the request until its core is
    // woken, then it is admitted again.
    lease_pending_ = true;
    tools_.yield();
    a.refusal = envelope::tool_error_code::quota_unreachable;
    return a;
  }
  // A refusal: the outcome table names its code; the figures go along whole and the row keeps
  // those it carries.
  a.refusal = envelope::row_of(v).code;
  a.retry_after_secs = fig_.retry_after_secs;
  a.quota_limit = fig_.quota_limit;
  a.quota_used = fig_.quota_used;
  a.quota_remaining = fig_.quota_remaining;
  return a;
}

mcp::admission core_host::rate_check() {
  mcp::admission a;
  if (!stdio_) {
    return a;  // over HTTP the handler rated the request before dispatch
  }
  if (!stdio_begin_call()) {
    a.refusal = envelope::tool_error_code::suspended;
    return a;
  }
  if (quota_.check_rate(*key_, now_ns_, fig_) == quota::rate_verdict::limited) {
    a.refusal = envelope::tool_error_code::rate_limited;
    a.retry_after_secs = fig_.retry_after_secs;
  }
  return a;
}

mcp::admission core_host::charge_extra() {
  mcp::admission a;
  if (stdio_ || key_ == nullptr || terms_.continuing) {
    // stdio has no batches; a re-delivery was charged on its first delivery
    return a;
  }
  // Into a copy: a refusal's retry_after_secs must not put Retry-After on the batch's 200.
  quota::figures f = fig_;
  if (quota_.check_rate(*key_, now_ns_, f) == quota::rate_verdict::limited) {
    a.refusal = envelope::tool_error_code::rate_limited;
    a.retry_after_secs = f.retry_after_secs;
  }
  fig_.rate_remaining = f.rate_remaining;  // 0 when refused
  fig_.rate_reset_secs = f.rate_reset_secs;
  return a;
}

void core_host::refund() {
  if (stdio_ || key_ == nullptr) {
    return;  // stdio never charged it
  }
  quota_.refund_rate(*key_, now_ns_, fig_);
}

void core_host::settle(bool success) {
  if (admitted_) {
    billed_here_ = billed_here_ || success;
    quota_.settle(ticket_, success);
    admitted_ = false;
    if (!success) {
      quota_filled_ = false;  // admit()'s figures counted the call; it was not billed
    }
    if (stdio_) {
      quota_.before_send(now_ns_);  // the usage record is written before the response
    }
  }
}

}  // namespace tollgate::app
