// The runner's TLS: each connection's OpenSSL state machine over two memory BIOs, fed by the
// ring's recv completions and drained into its sends (engine_runner.h). Nothing here touches a
// socket: the ring still moves every byte, and OpenSSL never blocks.
#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <cstddef>
#include <cstdint>

#include "engine_runner.h"

namespace tollgate::loadgen::detail {

namespace {

bool is_ip_literal(const std::string& host) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

constexpr std::size_t kPlainRoom = 16 * 1024;  ///< free space c.in keeps for one SSL_read

}  // namespace

bool runner::tls_begin(std::uint32_t i, std::uint64_t now) {
  connection& c = conns_[i];
  tls_end(c);
  c.ssl = SSL_new(cfg_.tls);
  c.net_in = BIO_new(BIO_s_mem());
  c.net_out = BIO_new(BIO_s_mem());
  if (c.ssl == nullptr || c.net_in == nullptr || c.net_out == nullptr) {
    BIO_free(c.net_in);
    BIO_free(c.net_out);
    c.net_in = c.net_out = nullptr;
    begin_close(i, "TLS set-up failed", now, true);
    return false;
  }
  // An empty memory BIO reads as "retry later", not as end of file.
  BIO_set_mem_eof_return(c.net_in, -1);
  SSL_set_bio(c.ssl, c.net_in, c.net_out);  // the SSL owns both BIOs from here
  SSL_set_connect_state(c.ssl);
  const std::string& host = cfg_.tls_host;
  bool ip = is_ip_literal(host);
  if (!ip) {
    SSL_set_tlsext_host_name(c.ssl, host.c_str());
  }
  if (cfg_.tls_check_name) {
    if (ip) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c.ssl), host.c_str());
    } else {
      SSL_set1_host(c.ssl, host.c_str());
    }
  }
  if (c.tls_in.empty() && br_ == nullptr) {
    c.tls_in.resize(kPlainRoom);
  }
  int r = SSL_do_handshake(c.ssl);  // writes the ClientHello into net_out
  if (r != 1 && SSL_get_error(c.ssl, r) != SSL_ERROR_WANT_READ) {
    ERR_clear_error();  // SSL_get_error reads the thread's queue: leave it empty
    begin_close(i, "TLS handshake failed", now, true);
    return false;
  }
  mark_dirty(i);
  return true;
}

bool runner::tls_feed(std::uint32_t i, const char* p, std::size_t n, std::uint64_t now) {
  connection& c = conns_[i];
  if (n > 0 && BIO_write(c.net_in, p, static_cast<int>(n)) != static_cast<int>(n)) {
    begin_close(i, "TLS buffer failed", now, true);
    return false;
  }
  if (!c.tls_ready) {
    int r = SSL_do_handshake(c.ssl);
    if (r == 1) {
      c.tls_ready = true;
      mark_dirty(i);  // the client's Finished, then the requests queued meanwhile
    } else {
      int e = SSL_get_error(c.ssl, r);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();  // SSL_get_error reads the thread's queue: leave it empty
        begin_close(i, "TLS handshake failed", now, true);
        return false;
      }
      if (tls_pending(c)) {
        mark_dirty(i);
      }
      return true;
    }
  }
  for (;;) {
    if (c.in.size() - c.in_len < kPlainRoom) {
      c.in.resize(c.in_len + 2 * kPlainRoom);
    }
    int r = SSL_read(c.ssl, c.in.data() + c.in_len, static_cast<int>(c.in.size() - c.in_len));
    if (r > 0) {
      c.in_len += static_cast<std::size_t>(r);
      continue;
    }
    int e = SSL_get_error(c.ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_ZERO_RETURN) {
      break;  // all decrypted, or close_notify (the TCP end of file follows)
    }
    ERR_clear_error();
    begin_close(i, "TLS record error", now, true);
    return false;
  }
  if (tls_pending(c)) {
    mark_dirty(i);  // e.g. an alert or a key update answer
  }
  return true;
}

void runner::tls_flush(std::uint32_t i) {
  connection& c = conns_[i];
  if (c.tls_ready && !c.out_q.empty()) {
    // A memory BIO takes everything: one SSL_write, the requests in as few records as fit.
    int r = SSL_write(c.ssl, c.out_q.data(), static_cast<int>(c.out_q.size()));
    if (r <= 0) {
      ERR_clear_error();
      begin_close(i, "TLS write failed", now_ns(), true);
      return;
    }
    c.out_q.clear();
  }
  std::size_t pend = BIO_ctrl_pending(c.net_out);
  if (pend == 0) {
    return;
  }
  c.out_fly.resize(pend);
  BIO_read(c.net_out, c.out_fly.data(), static_cast<int>(pend));
  c.fly_off = 0;
  submit_send(i);
}

bool runner::tls_pending(const connection& c) {
  return c.ssl != nullptr && BIO_ctrl_pending(c.net_out) > 0;
}

void runner::tls_end(connection& c) {
  if (c.ssl != nullptr) {
    SSL_free(c.ssl);  // frees both BIOs
  }
  c.ssl = nullptr;
  c.net_in = c.net_out = nullptr;
  c.tls_ready = false;
}

}  // namespace tollgate::loadgen::detail
