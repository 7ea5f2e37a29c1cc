// request_observer: per-core bookkeeping of answered requests for /metrics and the access log.
//
// Lifecycle, per core (core-local, no locks):
//   1. handle() starts: begin() notes the pass's CLOCK_MONOTONIC (engine_io::now_mono(), read
//      once per pass by the engine) and the core's billed-call counters.
//   2. handle() answered: answered() takes the outcome the gate's verdict came to, counts billed
//      and overage calls by
//      plan, and queues a request_record (copying the few strings the access log prints).
//      A deferred request (a gateway's fan-out) keeps its first start until it is answered.
//   3. before_send(), once per pass: end_pass() reads the clock once, so every record of the
//      pass gets its latency from one read; observes each in the histograms and hands the ones
//      sampled for the access log to the core's log buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core_host.h"
#include "metrics.h"
#include "request_record.h"
#include "tollgate/http/handler.h"
#include "tollgate/mcp/tool.h"
#include "tollgate/quota/service.h"

namespace tollgate::app {

class access_log;
class access_log_core;

class request_observer {
 public:
  /// `metrics` and `log` may be null (off). `tools`: the registry the tool slots index.
  request_observer(int core, request_metrics* metrics, access_log* log, const mcp::registry& tools);
  ~request_observer();

  void attach(http::engine_io& io) noexcept;
  bool on() const noexcept { return metrics_ != nullptr || log_ != nullptr; }

  /// Step 1: before the request is routed.
  void begin(const quota::core_ledger& q) noexcept;
  /// The request was deferred: its start is kept for its re-delivery.
  void deferred() noexcept;
  /// Step 2. `result`: what the answer came to (the gate's verdict, as the surface that answered
  /// set it); `key`: the authenticated key or null; `facts`: the MCP endpoint's report (null
  /// for other routes: its method, tool and partial shards).
  void answered(const http::request& req, route r, const http::response_info& info, outcome result,
                uint64_t bytes_out, const quota::key_record* key, const mcp_facts* facts,
                const quota::core_ledger& q, int64_t now_ns);
  /// Step 3, once per loop pass.
  void end_pass();
  /// About every 100 ms: the access log's timed flush.
  void on_tick();
  /// The completion of the access log's ring write.
  void on_file_written(int64_t res);

 private:
  int64_t now_mono() const noexcept;
  bool sampled(outcome o) noexcept;

  int core_;
  request_metrics* metrics_;
  access_log* log_;
  std::unique_ptr<access_log_core> log_core_;
  const mcp::registry& tools_;
  http::engine_io* io_ = nullptr;
  int64_t start_ = 0;
  uint64_t billed0_ = 0;
  uint64_t overage0_ = 0;
  uint64_t rng_ = 0x9e3779b97f4a7c15ULL;
  struct deferred_start {
    uint32_t gen = 0;
    int64_t start = 0;
    bool set = false;
  };
  std::vector<deferred_start> deferred_;  // by connection slot
  std::vector<request_record> pending_;   // answered this pass
};

}  // namespace tollgate::app
