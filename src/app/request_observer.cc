#include "request_observer.h"

#include <time.h>

#include "access_log.h"

namespace tollgate::app {
namespace {

int64_t mono_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Bytes of the request as received: its head and body (the views point into one buffer; a
// chunked body was decoded in place, so it counts as decoded).
uint64_t request_bytes(const http::request& req) noexcept {
  const char* begin = req.method.data();
  const char* end = nullptr;
  if (!req.body.empty()) {
    end = req.body.data() + req.body.size();
  } else if (req.num_headers > 0) {
    const auto& last = req.headers[req.num_headers - 1].value;
    end = last.data() + last.size() + 4;  // "\r\n\r\n"
  } else {
    end = req.target.data() + req.target.size() + 13;  // " HTTP/1.1\r\n\r\n"
  }
  return begin != nullptr && end > begin ? static_cast<uint64_t>(end - begin) : 0;
}

}  // namespace

request_observer::request_observer(int core, request_metrics* metrics, access_log* log,
                                   const mcp::registry& tools)
    : core_(core), metrics_(metrics), log_(log), tools_(tools) {
  if (log_ != nullptr) {
    log_core_ = std::make_unique<access_log_core>(*log_, core, metrics);
  }
  rng_ ^= static_cast<uint64_t>(core + 1) * 0xbf58476d1ce4e5b9ULL;
  pending_.reserve(256);
}

request_observer::~request_observer() = default;

void request_observer::attach(http::engine_io& io) noexcept {
  io_ = &io;
  if (log_core_) {
    log_core_->attach(&io);
  }
}

int64_t request_observer::now_mono() const noexcept {
  return io_ != nullptr ? io_->now_mono() : mono_ns();
}

void request_observer::begin(const quota::core_ledger& q) noexcept {
  start_ = now_mono();
  billed0_ = q.billed_calls();
  overage0_ = q.overage_calls();
}

void request_observer::deferred() noexcept {
  if (io_ == nullptr) {
    return;
  }
  const http::deferral_token t = io_->current();
  if (t.slot >= deferred_.size()) {
    deferred_.resize(t.slot + 1);  // grows with the connection slots in use (warm-up)
  }
  deferred_start& d = deferred_[t.slot];
  if (!d.set || d.gen != t.gen) {
    d = {t.gen, start_, true};
  }
}

bool request_observer::sampled(outcome o) noexcept {
  if (o != outcome::ok) {
    return true;  // errors are always logged
  }
  const double p = log_->sample();
  if (p >= 1.0) {
    return true;
  }
  // xorshift64: a per-core stream, no shared state.
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return static_cast<double>(rng_ >> 11) * 0x1.0p-53 < p;
}

void request_observer::answered(const http::request& req, route r, const http::response_info& info,
                                outcome result, uint64_t bytes_out, const quota::key_record* key,
                                const mcp_facts* facts, const quota::core_ledger& q,
                                int64_t now_ns) {
  request_record rec;
  rec.start_mono_ns = start_;
  if (io_ != nullptr && !deferred_.empty()) {
    const http::deferral_token t = io_->current();
    if (t.slot < deferred_.size() && deferred_[t.slot].set) {
      if (deferred_[t.slot].gen == t.gen) {
        rec.start_mono_ns = deferred_[t.slot].start;  // a re-delivery: its first start
      }
      deferred_[t.slot].set = false;
    }
  }
  rec.time_ns = now_ns;
  rec.status = static_cast<uint16_t>(info.status);
  rec.r = r;
  rec.billed = q.billed_calls() - billed0_;
  rec.overage = q.overage_calls() - overage0_;
  rec.bytes_in = request_bytes(req);
  rec.bytes_out = bytes_out;
  rec.result = result;
  if (facts != nullptr) {
    rec.shards_answered = facts->shards.answered;
    rec.shards_total = facts->shards.total;
    if (facts->report.tool != nullptr) {
      const size_t i = tools_.index_of(facts->report.tool);
      rec.tool_slot = static_cast<uint8_t>(i < request_metrics::max_tools ? i + 1 : 0);
    }
  }
  if (key != nullptr) {
    rec.key_id = key->key_id;
    if (metrics_ != nullptr && rec.billed != 0) {
      metrics_->bill(core_, key->plan, rec.billed, rec.overage);
    }
  }
  if (log_ != nullptr && sampled(rec.result)) {
    rec.log = true;
    rec.method.set(req.method);
    if (facts != nullptr) {
      rec.mcp_method.set(facts->report.method);
      if (facts->report.tool != nullptr) {
        rec.tool.set(facts->report.tool->name);
      }
    }
    if (key != nullptr) {
      rec.account.set(key->account);
    }
    if (io_ != nullptr) {
      rec.peer.len = static_cast<uint8_t>(io_->peer_address(rec.peer.data, sizeof(rec.peer.data)));
      rec.tls.set(io_->tls_version());
    }
  }
  pending_.push_back(rec);
}

void request_observer::end_pass() {
  if (!pending_.empty()) {
    const int64_t end = mono_ns();  // one clock read for every request of the pass
    for (const request_record& rec : pending_) {
      const int64_t latency = end - rec.start_mono_ns;
      if (metrics_ != nullptr) {
        metrics_->observe(core_, rec.r, rec.tool_slot, rec.result, latency);
      }
      if (rec.log) {
        log_core_->append(rec, latency);
      }
    }
    pending_.clear();
  }
  if (log_core_) {
    log_core_->flush(false);
  }
}

void request_observer::on_tick() {
  if (log_core_) {
    log_core_->flush(true);
  }
}

void request_observer::on_file_written(int64_t res) {
  if (log_core_) {
    log_core_->on_written(res);
  }
}

}  // namespace tollgate::app
