// The HTTPS listener's wiring: [tls] settings checked at start (and by `config check`), the
// process's TLS context made from them, and its /metrics series.
#pragma once

#include <memory>
#include <string_view>

#include "tollgate/common/buffer.h"
#include "tollgate/config/config.h"
#include "tollgate/net/tls.h"

namespace tollgate::app {

/// 0 when [tls] (or the --tls-* flags) is absent or complete with a pair that loads, matches and
/// is within its validity period; else 2 after a message naming the file at fault.
int check_tls_settings(const config::settings& s);

/// The context the engine serves HTTPS with; null when there is no HTTPS listener or on error
/// (`code` = 2 after the message).
std::shared_ptr<net::tls_context> make_tls(const config::settings& s, int& code);

/// tollgate_tls_* series (Prometheus text) appended to `out`.
void tls_metrics(const net::tls_context& t, out_buffer& out);

}  // namespace tollgate::app
