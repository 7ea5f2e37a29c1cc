#include "net/tls_session.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace tollgate::net::detail {

tls_failure classify_tls_error(unsigned long err) noexcept {
  if (ERR_GET_LIB(err) != ERR_LIB_SSL) {
    return tls_failure::other;
  }
  switch (ERR_GET_REASON(err)) {
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_VERSION_TOO_LOW:
    case SSL_R_WRONG_SSL_VERSION:
      return tls_failure::protocol_version;
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_NO_SUITABLE_KEY_SHARE:
      return tls_failure::no_shared_cipher;
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_RECORD_LENGTH_MISMATCH:
      return tls_failure::not_tls;
    default:
      return tls_failure::other;
  }
}

bool tls_session::open(ssl_ctx_st* ctx) {
  close();
  SSL* ssl = SSL_new(ctx);
  BIO* rb = BIO_new(BIO_s_mem());
  BIO* wb = BIO_new(BIO_s_mem());
  if (ssl == nullptr || rb == nullptr || wb == nullptr) {
    SSL_free(ssl);
    BIO_free(rb);
    BIO_free(wb);
    return false;
  }
  BIO_set_mem_eof_return(rb, -1);  // empty = "want more", not end of stream
  BIO_set_mem_eof_return(wb, -1);
  SSL_set_bio(ssl, rb, wb);
  SSL_set_accept_state(ssl);
  ssl_ = ssl;
  established_ = shut_ = false;
  return true;
}

void tls_session::close() noexcept {
  SSL_free(ssl_);  // frees both BIOs; null is a no-op
  ssl_ = nullptr;
  established_ = shut_ = false;
}

bool tls_session::feed(const char* data, size_t n) {
  BIO* rb = SSL_get_rbio(ssl_);
  if (!established_ && BIO_ctrl_pending(rb) + n > kMaxHandshakeBytes) {
    return false;
  }
  return BIO_write(rb, data, static_cast<int>(n)) == static_cast<int>(n);
}

tls_session::step tls_session::handshake(tls_failure& why) {
  if (established_) {
    return step::done;
  }
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    established_ = true;
    return step::done;
  }
  if (SSL_get_error(ssl_, r) == SSL_ERROR_WANT_READ) {
    return step::more;
  }
  why = classify_tls_error(ERR_peek_last_error());
  ERR_clear_error();
  return step::failed;
}

bool tls_session::resumed() const noexcept {
  return ssl_ != nullptr && SSL_session_reused(ssl_) != 0;
}

bool tls_session::tls13() const noexcept {
  return ssl_ != nullptr && SSL_version(ssl_) == TLS1_3_VERSION;
}

std::string_view tls_session::version() const noexcept {
  return ssl_ != nullptr ? SSL_get_version(ssl_) : std::string_view{};
}

tls_session::read_result tls_session::read(char* buf, size_t cap, size_t& got) {
  got = 0;
  ERR_clear_error();
  if (SSL_read_ex(ssl_, buf, cap, &got) == 1) {
    return read_result::data;
  }
  const int e = SSL_get_error(ssl_, 0);
  ERR_clear_error();
  if (e == SSL_ERROR_WANT_READ) {
    return read_result::more;
  }
  return e == SSL_ERROR_ZERO_RETURN ? read_result::peer_closed : read_result::broken;
}

bool tls_session::write(const char* data, size_t n) {
  size_t w = 0;
  ERR_clear_error();
  if (SSL_write_ex(ssl_, data, n, &w) != 1 || w != n) {
    ERR_clear_error();
    return false;
  }
  return true;
}

void tls_session::shutdown() {
  if (!shut_ && established_) {
    SSL_shutdown(ssl_);
    ERR_clear_error();
    shut_ = true;
  }
}

size_t tls_session::pending_output() const noexcept {
  return ssl_ != nullptr ? BIO_ctrl_pending(SSL_get_wbio(ssl_)) : 0;
}

size_t tls_session::take_output(char* dst, size_t cap) {
  const int n = BIO_read(SSL_get_wbio(ssl_), dst, static_cast<int>(cap));
  return n > 0 ? static_cast<size_t>(n) : 0;
}

}  // namespace tollgate::net::detail
