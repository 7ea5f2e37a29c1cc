#include "tls_setup.h"

#include <fmt/format.h>

#include <iterator>

#include "tollgate/common/log.h"

namespace tollgate::app {

int check_tls_settings(const config::settings& s) {
  const bool any = s.tls_listen.has_value() || !s.tls_cert.empty() || !s.tls_key.empty();
  if (!any) {
    return 0;
  }
  if (!s.tls_listen || s.tls_cert.empty() || s.tls_key.empty()) {
    log_error(
        "HTTPS needs a listen address, a certificate and a key together ([tls] listen, cert, "
        "key or --tls-listen, --tls-cert, --tls-key)");
    return 2;
  }
  if (std::string bad = net::check_tls_pair(s.tls_cert, s.tls_key); !bad.empty()) {
    log_error("{}", bad);
    return 2;
  }
  return 0;
}

std::shared_ptr<net::tls_context> make_tls(const config::settings& s, int& code) {
  code = check_tls_settings(s);
  if (code != 0 || !s.tls_listen) {
    return nullptr;
  }
  auto t = net::tls_context::create(s.tls_cert, s.tls_key, s.tls_min_version, s.tls_ktls);
  if (!t) {
    log_error("{}", t.error());
    code = 2;
    return nullptr;
  }
  return std::move(*t);
}

void tls_metrics(const net::tls_context& t, out_buffer& out) {
  auto it = std::back_inserter(out);
  const net::tls_stats& s = t.stats();
  auto v = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  fmt::format_to(it,
                 "# HELP tollgate_tls_handshakes_total TLS handshakes completed.\n"
                 "# TYPE tollgate_tls_handshakes_total counter\n"
                 "tollgate_tls_handshakes_total{{kind=\"full\"}} {}\n"
                 "tollgate_tls_handshakes_total{{kind=\"resumed\"}} {}\n"
                 "# HELP tollgate_tls_protocol_total TLS handshakes completed by protocol.\n"
                 "# TYPE tollgate_tls_protocol_total counter\n"
                 "tollgate_tls_protocol_total{{version=\"TLSv1.2\"}} {}\n"
                 "tollgate_tls_protocol_total{{version=\"TLSv1.3\"}} {}\n"
                 "# HELP tollgate_tls_handshakes_failed_total TLS handshakes that failed.\n"
                 "# TYPE tollgate_tls_handshakes_failed_total counter\n",
                 v(s.handshakes_full), v(s.handshakes_resumed), v(s.tls12), v(s.tls13));
  for (int i = 0; i < net::tls_failure_count; ++i) {
    fmt::format_to(it, "tollgate_tls_handshakes_failed_total{{reason=\"{}\"}} {}\n",
                   net::tls_failure_name(static_cast<net::tls_failure>(i)), v(s.failed[i]));
  }
  fmt::format_to(
      it,
      "# HELP tollgate_tls_handshakes_deferred_total Handshake steps moved to a later "
      "loop pass by the per-pass handshake budget.\n"
      "# TYPE tollgate_tls_handshakes_deferred_total counter\n"
      "tollgate_tls_handshakes_deferred_total {}\n"
      "# HELP tollgate_tls_connections_open TLS connections open now.\n"
      "# TYPE tollgate_tls_connections_open gauge\n"
      "tollgate_tls_connections_open {}\n"
      "# HELP tollgate_tls_reloads_total Certificate pairs put in force by a reload.\n"
      "# TYPE tollgate_tls_reloads_total counter\n"
      "tollgate_tls_reloads_total {}\n"
      "# HELP tollgate_tls_kernel_tx_total kTLS: sessions whose transmit side the kernel "
      "took, handovers it refused (those stay in user space), and sessions closed "
      "because the peer asked for a KeyUpdate the kernel cannot send.\n"
      "# TYPE tollgate_tls_kernel_tx_total counter\n"
      "tollgate_tls_kernel_tx_total{{event=\"taken\"}} {}\n"
      "tollgate_tls_kernel_tx_total{{event=\"refused\"}} {}\n"
      "tollgate_tls_kernel_tx_total{{event=\"key_update_close\"}} {}\n",
      v(s.handshakes_deferred), v(s.open), v(s.reloads), v(s.kernel_tx), v(s.kernel_tx_refused),
      v(s.kernel_tx_key_update));
}

}  // namespace tollgate::app
