// The ops surface: /healthz, /readyz and /metrics (on the public listener unless moved to the
// admin listener), and the admin listener's own handler. Core-local handlers over the shared,
// read-only state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "handler.h"

namespace tollgate::app {

template <class Answer>
class offcore;

/// Answers an ops route (healthz, readyz, metrics). `scratch` is the core's reusable buffer.
http::response_info handle_ops(const shared_state& s, route r, const http::request& req,
                               out_buffer& scratch, out_buffer& out);

/// The handler of the separate admin listener (--admin-listen): the ops routes, answered on its
/// core, and the admin routes (POST /admin/reload, the admin API), answered by a worker thread
/// while the request is parked (offcore.h): they write files with fsync, may wait for Redis and
/// wait until every core has switched tables, and a probe of /healthz or a scrape of /metrics
/// on the same listener never waits behind them.
class ops_handler final : public http::handler {
 public:
  explicit ops_handler(const shared_state& s);
  ~ops_handler() override;
  http::response_info handle(const http::request& req, out_buffer& out, int64_t now_ns) override;
  void attach(http::engine_io& io) override;
  void on_wake(int64_t now_ns) override;

  /// An admin route's whole response, written off the core.
  struct admin_answer {
    http::response_info info;
    std::string bytes;
  };

 private:
  http::response_info admin_route(const http::request& req, out_buffer& out);

  const shared_state& s_;
  out_buffer scratch_;
  http::engine_io* io_ = nullptr;
  std::function<void()> wake_;
  std::unique_ptr<offcore<admin_answer>> work_;
  std::vector<http::deferral_token> parked_;
};

}  // namespace tollgate::app
