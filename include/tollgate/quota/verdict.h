// The quota core's verdicts on one request: the rate limit's and a billable call's admission.
// A header of plain enums so that the outcome table (envelope/outcome_table.h), which says how
// each refusal reaches an agent, can name them without depending on the quota service.
#pragma once

#include <cstdint>

namespace tollgate::quota {

enum class rate_verdict : uint8_t { ok, limited };
/// unavailable: the call cannot be recorded (the core's usage journal cannot be written, or has
/// no room reserved on disk for its record), so it is not made and not billed.
/// quota_unreachable: cluster mode only, a stop key whose node holds no units while the quota
/// service cannot be reached (tool error `unavailable` with its own message, REST 503 +
/// Retry-After).
/// lease_pending: cluster mode only, and only when the caller said it may wait: the node holds
/// no units of the key and has asked Redis for some. Nothing was admitted or counted; the caller
/// parks the request and admits it again when its core is woken (lease_source.h), passing
/// may_wait = false once its bound has passed. Never an answer: no outcome row.
enum class admit_verdict : uint8_t {
  ok,
  suspended,
  quota_exceeded,
  unavailable,
  quota_unreachable,
  lease_pending
};

}  // namespace tollgate::quota
