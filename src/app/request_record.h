// request_record: what one answered request came to, kept from handle() until the end of its
// loop pass, when its latency is known (one clock read per pass), then fed to /metrics and the
// access log. Core-local: each core keeps its own records.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "metrics.h"
#include "tollgate/common/outcome.h"

namespace tollgate::app {

/// A short string copied into the record (views into the request do not outlive handle()).
/// Longer values are cut at N bytes.
template <size_t N>
struct short_text {
  char data[N];
  uint8_t len = 0;
  void set(std::string_view s) noexcept {
    len = static_cast<uint8_t>(s.size() < N ? s.size() : N);
    if (len != 0) {  // an empty view may hold a null pointer, which memcpy must never get
      std::memcpy(data, s.data(), len);
    }
  }
  std::string_view view() const noexcept { return {data, len}; }
};

struct request_record {
  int64_t start_mono_ns = 0;     ///< CLOCK_MONOTONIC of the pass that read the request
  int64_t time_ns = 0;           ///< CLOCK_REALTIME of that pass
  uint64_t key_id = 0;           ///< 0: no key was recognised
  uint64_t billed = 0;           ///< calls billed by this request (a batch may bill several)
  uint64_t overage = 0;          ///< of them, billed past the quota
  uint64_t bytes_in = 0;         ///< request head and body
  uint64_t bytes_out = 0;        ///< response head and body
  uint32_t shards_answered = 0;  ///< a partial search: shards that answered, of shards_total
  uint32_t shards_total = 0;
  uint16_t status = 0;
  route r = route::not_found;
  outcome result = outcome::ok;
  uint8_t tool_slot = 0;  ///< request_metrics' tool slot (registry index + 1), 0: none
  bool log = false;       ///< chosen for the access log (sampling)
  // Filled only when `log`:
  short_text<8> method;
  short_text<32> mcp_method;
  short_text<32> tool;
  short_text<64> account;
  short_text<48> peer;
  short_text<8> tls;  ///< "TLSv1.3" over HTTPS; empty over plain HTTP
};

}  // namespace tollgate::app
