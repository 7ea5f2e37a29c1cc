// The client TLS context (tls_client.h).
#include "tls_client.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace tollgate::loadgen {

namespace {

std::string openssl_error() {
  char buf[256];
  unsigned long e = ERR_get_error();
  if (e == 0) {
    return "unknown OpenSSL error";
  }
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

}  // namespace

ssl_ctx_st* make_tls_client(const tls_options& o, std::string& err) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    err = "TLS: " + openssl_error();
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof kAlpn);
  if (o.insecure) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    int ok = o.cafile.empty() ? SSL_CTX_set_default_verify_paths(ctx)
                              : SSL_CTX_load_verify_locations(ctx, o.cafile.c_str(), nullptr);
    if (ok != 1) {
      err = "TLS: cannot load the trusted certificates" +
            (o.cafile.empty() ? std::string() : " from " + o.cafile) + ": " + openssl_error();
      SSL_CTX_free(ctx);
      return nullptr;
    }
  }
  return ctx;
}

void free_tls_client(ssl_ctx_st* ctx) { SSL_CTX_free(ctx); }

}  // namespace tollgate::loadgen
