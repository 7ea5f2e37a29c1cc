// loadgen's TLS (https:// URLs or --tls): the client context made once per run (tls_client.cc);
// each connection's record layer runs over two memory BIOs on its load thread's ring
// (engine_tls.cc), so the ring still reads and writes every byte and no call blocks.
#pragma once

#include <string>

struct ssl_ctx_st;

namespace tollgate::loadgen {

struct tls_options {
  bool enabled = false;
  bool insecure = false;  ///< no certificate or name check (-k)
  std::string cafile;     ///< trust this PEM file instead of the system's store
  std::string host;       ///< the URL's host: SNI (when a name) and the name checked
};

/// A client context: TLS 1.2 and 1.3, ALPN http/1.1, the peer's chain and name checked unless
/// `insecure`. Suites and protocol floors also follow the OpenSSL configuration (OPENSSL_CONF's
/// system_default), which is how a benchmark forces one suite. Null with `err` on failure.
ssl_ctx_st* make_tls_client(const tls_options& o, std::string& err);

void free_tls_client(ssl_ctx_st* ctx);

}  // namespace tollgate::loadgen
