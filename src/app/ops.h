// The ops surface: /healthz, /readyz and /metrics (on the public listener unless moved to the
// admin listener), and the admin listener's own handler. Core-local handlers over the shared,
// read-only state.
#pragma once

#include "handler.h"

namespace tollgate::app {

/// Answers an ops route (healthz, readyz, metrics). `scratch` is the core's reusable buffer.
http::response_info handle_ops(const shared_state& s, route r, const http::request& req,
                               out_buffer& scratch, out_buffer& out);

/// Serves only the ops routes: the handler of the separate admin listener (--admin-listen).
class ops_handler final : public http::handler {
 public:
  explicit ops_handler(const shared_state& s) : s_(s) { scratch_.reserve(16384); }
  http::response_info handle(const http::request& req, out_buffer& out, int64_t now_ns) override;

 private:
  const shared_state& s_;
  out_buffer scratch_;
};

}  // namespace tollgate::app
