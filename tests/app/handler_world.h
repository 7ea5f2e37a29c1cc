// One tollgate core's request path without a ring: the serve wiring (quota service on a temp
// data dir, the embedded sample corpus, the real tools, routes and envelopes) around one
// core_handler, fed whole HTTP requests as bytes through the real HTTP parser. The clock is the
// caller's (`now_ns` per request), so rate limits are deterministic.
//
// Keys: `roomy` (no practical rate or quota limit), `tight` (1 request/s, burst 2; 3 billed
// calls a month, stop), `suspended` (roomy plan, account suspended). Used by the error-table
// tests and by the whole-request fuzz target (no gtest here).
#pragma once

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "app/handler.h"
#include "app/metrics.h"
#include "app/tools.h"
#include "tollgate/config/config.h"
#include "tollgate/http/parser.h"
#include "tollgate/http/response.h"
#include "tollgate/quota/key_store.h"

namespace tollgate::app::test {

class handler_world {
 public:
  /// Serves `backend` (default: the embedded sample in 2 shards).
  explicit handler_world(std::unique_ptr<search::backend> backend = nullptr) {
    char tmpl[] = "/tmp/tollgate-world-XXXXXX";
    const char* p = mkdtemp(tmpl);
    dir_ = p ? p : "/tmp/tollgate-world";
    settings_ = config::defaults();
    settings_.data_dir = dir_;
    settings_.search_cache_entries = 0;
    st_.settings = &settings_;
    quota::plan_map plans;
    plans["roomy"] = plan("roomy", 1e9, 1000000000, int64_t{1} << 40);
    plans["tight"] = plan("tight", 1, 2, 3);
    const int64_t unix = start_ns_ / 1000000000;
    quota::key_store store(dir_);
    roomy_ = secret(store.create_key("acme", "roomy", plans, unix));
    tight_ = secret(store.create_key("small", "tight", plans, unix));
    suspended_ = secret(store.create_key("gone", "roomy", plans, unix));
    (void)store.suspend("gone");
    quota::service_options qo;
    qo.data_dir = dir_;
    qo.plans = plans;
    qo.cores = 1;
    auto q = quota::service::open(std::move(qo), start_ns_);
    if (q) {
      st_.quota = std::move(*q);
    }
    st_.backend = backend ? std::move(backend) : search::load_sample(2);
    st_.envelopes = std::make_unique<envelope::cache>(envelope::server_identity{});
    register_tools(st_.tools);
    st_.counters = std::make_unique<request_counters>(1);
    st_.cores = 1;
    register_routes(st_);
    if (st_.quota) {
      handler_ = std::make_unique<core_handler>(st_, 0);
    }
  }
  ~handler_world() {
    handler_.reset();
    st_.quota.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  handler_world(const handler_world&) = delete;
  handler_world& operator=(const handler_world&) = delete;

  bool ok() const { return handler_ != nullptr && !roomy_.empty(); }
  const std::string& roomy() const { return roomy_; }
  const std::string& tight() const { return tight_; }
  const std::string& suspended() const { return suspended_; }
  /// The wall clock at construction (a time in the quota month the keys were made in).
  int64_t start_ns() const { return start_ns_; }

  /// Answers the first request in `raw` as the engine would: the handler's response, or the
  /// parser's error response. Empty when `raw` holds no complete request.
  std::string respond(std::string raw, int64_t now_ns) {
    raw.append(64, '\0');  // the receive buffers' padding
    http::request req;
    http::limits lim;
    out_.clear();
    last_method_.clear();
    const http::parse_result r = http::parse_request(raw.data(), raw.size() - 64, lim, req);
    if (r.status == http::parse_status::error) {
      http::write_error_response(out_, r.error);
    } else if (r.status == http::parse_status::complete) {
      last_method_ = std::string(req.method);
      (void)handler_->handle(req, out_, now_ns);
      handler_->before_send(now_ns);
    }
    return std::string(out_.view());
  }
  /// The settings the handler reads (search_slice_postings is read when it is attached).
  config::settings& settings() { return settings_; }
  core_handler& handler() { return *handler_; }
  /// The method of the request respond() last answered ("" after a parser error).
  const std::string& last_method() const { return last_method_; }

 private:
  static quota::plan plan(std::string name, double rate, int64_t burst, int64_t monthly) {
    quota::plan p;
    p.name = std::move(name);
    p.rate_per_sec = rate;
    p.burst = burst;
    p.monthly_quota = monthly;
    p.overage = quota::overage_policy::stop;
    return p;
  }
  template <class R>
  static std::string secret(const R& r) {
    return r ? r->secret : std::string();
  }

  int64_t start_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::string dir_;
  config::settings settings_;
  shared_state st_;
  std::unique_ptr<core_handler> handler_;
  std::string roomy_;
  std::string tight_;
  std::string suspended_;
  out_buffer out_;
  std::string last_method_;
};

}  // namespace tollgate::app::test
