// Wiring of /metrics' request metrics and the access log into the shared state (serve).
#pragma once

#include "handler.h"
#include "tollgate/config/config.h"

namespace tollgate::app {

/// Makes st.metrics for `cores` cores (tool labels from st.tools), opens the access log when
/// [log] access is set, and copies [server] public_metrics. 0, or exit code 2 after the message
/// (a log path that cannot be opened for appending).
int setup_observability(shared_state& st, const config::settings& s, int cores);

}  // namespace tollgate::app
