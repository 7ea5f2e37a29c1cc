// The rate and quota response headers, written from one figures snapshot (see
// write_rate_headers in tollgate/quota/service.h).
#include <cstring>

#include "tollgate/common/assert.h"
#include "tollgate/common/json_out.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {

namespace {
// A header fragment copied with one fixed-size move.
template <size_t N>
char* put_text(char* dst, const char (&s)[N]) noexcept {
  std::memcpy(dst, s, N - 1);
  return dst + (N - 1);
}

// Writes v at dst and remembers where its digits are, so a second use copies them instead of
// converting again (six values appear twice in the headers).
struct number_run {
  const char* at = nullptr;
  size_t len = 0;
};
char* put_remembered(char* dst, int64_t v, number_run& r) noexcept {
  r.at = dst;
  char* e = json_out::put_number(dst, v);
  r.len = static_cast<size_t>(e - dst);
  return e;
}
char* put_again(char* dst, const number_run& r) noexcept {
  std::memcpy(dst, r.at, r.len);  // an earlier part of the same reservation: no overlap
  return dst + r.len;
}

constexpr char kRateHeaderText[] =
    "X-RateLimit-Limit: \r\nX-RateLimit-Remaining: \r\nX-RateLimit-Reset: \r\nX-Quota-Limit: "
    "\r\nX-Quota-Used: \r\nX-Quota-Remaining: \r\nX-Quota-Reset: \r\nRateLimit-Policy: "
    "\"burst\";q=;w=, \"monthly\";q=;w=2592000\r\nRateLimit: \"burst\";r=;t=, \"monthly\";r=;t="
    "\r\nRetry-After: \r\n";
// The most write_rate_headers() can write: its fixed text and 15 numbers of at most 20
// characters each (an int64 with its sign).
constexpr size_t kRateHeaderBound = sizeof kRateHeaderText - 1 + 15 * 20;
}  // namespace

void write_rate_headers(out_buffer& out, const figures& f) {
  // One reservation for the worst case, then plain stores: no per-piece capacity checks and no
  // fmt.
  char* const begin = out.prepare(kRateHeaderBound);
  char* p = begin;
  number_run rate_limit;
  number_run rate_remaining;
  number_run rate_reset;
  number_run quota_limit;
  number_run quota_remaining;
  number_run quota_reset;
  p = put_text(p, "X-RateLimit-Limit: ");
  p = put_remembered(p, f.rate_limit, rate_limit);
  p = put_text(p, "\r\nX-RateLimit-Remaining: ");
  p = put_remembered(p, f.rate_remaining, rate_remaining);
  p = put_text(p, "\r\nX-RateLimit-Reset: ");
  p = put_remembered(p, f.rate_reset_secs, rate_reset);
  p = put_text(p, "\r\nX-Quota-Limit: ");
  p = put_remembered(p, f.quota_limit, quota_limit);
  p = put_text(p, "\r\nX-Quota-Used: ");
  p = json_out::put_number(p, f.quota_used);
  p = put_text(p, "\r\nX-Quota-Remaining: ");
  p = put_remembered(p, f.quota_remaining, quota_remaining);
  p = put_text(p, "\r\nX-Quota-Reset: ");
  p = put_remembered(p, f.quota_reset_secs, quota_reset);
  p = put_text(p, "\r\nRateLimit-Policy: \"burst\";q=");
  p = put_again(p, rate_limit);
  p = put_text(p, ";w=");
  p = json_out::put_number(p, f.rate_window_secs);
  p = put_text(p, ", \"monthly\";q=");
  p = put_again(p, quota_limit);
  p = put_text(p, ";w=2592000\r\nRateLimit: \"burst\";r=");
  p = put_again(p, rate_remaining);
  p = put_text(p, ";t=");
  p = put_again(p, rate_reset);
  p = put_text(p, ", \"monthly\";r=");
  p = put_again(p, quota_remaining);
  p = put_text(p, ";t=");
  p = put_again(p, quota_reset);
  p = put_text(p, "\r\n");
  if (f.retry_after_secs > 0) {
    p = put_text(p, "Retry-After: ");
    p = json_out::put_number(p, f.retry_after_secs);
    p = put_text(p, "\r\n");
  }
  TOLLGATE_ASSERT(static_cast<size_t>(p - begin) <= kRateHeaderBound);
  out.commit(static_cast<size_t>(p - begin));
}

}  // namespace tollgate::quota
