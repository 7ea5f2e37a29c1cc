#include "net/tls_session.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstring>
#include <new>
#include <string_view>

#include "net/ktls.h"
#include "tollgate/common/percent.h"

namespace tollgate::net::detail {

// What a kernel handover needs, followed while the session may still hand over.
struct tx_track {
  uint8_t secret[48] = {};  // SERVER_TRAFFIC_SECRET_0 (the suite's hash length)
  uint8_t secret_len = 0;
  bool updated = false;  // the session sent a KeyUpdate: the secret above is no longer in use
  uint64_t seq = 0;      // records written under the application traffic key so far
  ~tx_track() { OPENSSL_cleanse(secret, sizeof secret); }
};

namespace {

int track_index() {
  static const int idx = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return idx;
}

// The key log line "SERVER_TRAFFIC_SECRET_0 <client random> <secret>", both in hex (the NSS key
// log format OpenSSL writes); other lines (handshake secrets, the client's) are not needed.
void keylog_cb(const SSL* ssl, const char* line) {
  auto* t = static_cast<tx_track*>(SSL_get_ex_data(ssl, track_index()));
  constexpr std::string_view kLabel = "SERVER_TRAFFIC_SECRET_0 ";
  std::string_view l(line);
  if (t == nullptr || !l.starts_with(kLabel)) {
    return;
  }
  l.remove_prefix(kLabel.size());
  const size_t sp = l.find(' ');
  if (sp == std::string_view::npos) {
    return;
  }
  l.remove_prefix(sp + 1);
  if (l.size() % 2 != 0 || l.size() / 2 > sizeof t->secret) {
    return;
  }
  for (size_t i = 0; i < l.size() / 2; ++i) {
    const int hi = hex_digit_value(l[2 * i]);
    const int lo = hex_digit_value(l[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      t->secret_len = 0;
      return;
    }
    t->secret[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  t->secret_len = static_cast<uint8_t>(l.size() / 2);
}

// Counts the records the session writes under its application traffic key. OpenSSL reports each
// record header it writes, and each handshake message after its record: in TLS 1.3 the server's
// Finished is the last record under the handshake key, so the count restarts there.
void msg_cb(int write_p, int, int content_type, const void* buf, size_t len, SSL* ssl, void* arg) {
  auto* t = static_cast<tx_track*>(arg);
  if (write_p == 0 || t == nullptr) {
    return;
  }
  if (content_type == SSL3_RT_HEADER) {
    ++t->seq;
    return;
  }
  if (content_type != SSL3_RT_HANDSHAKE || len == 0) {
    return;
  }
  const uint8_t type = static_cast<const uint8_t*>(buf)[0];
  if (type == SSL3_MT_FINISHED && SSL_version(ssl) == TLS1_3_VERSION) {
    t->seq = 0;
  } else if (type == SSL3_MT_KEY_UPDATE) {
    t->updated = true;
  }
}

}  // namespace

void capture_tx_secrets(ssl_ctx_st* ctx) { SSL_CTX_set_keylog_callback(ctx, keylog_cb); }

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

bool tls_session::open(ssl_ctx_st* ctx, bool track_keys) {
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
  established_ = shut_ = kernel_tx_ = false;
  if (track_keys) {
    track_ = new (std::nothrow) tx_track();
    if (track_ != nullptr) {
      SSL_set_ex_data(ssl, track_index(), track_);
      SSL_set_msg_callback(ssl, msg_cb);
      SSL_set_msg_callback_arg(ssl, track_);
    }
  }
  return true;
}

void tls_session::close() noexcept {
  SSL_free(ssl_);  // frees both BIOs; null is a no-op
  ssl_ = nullptr;
  delete track_;
  track_ = nullptr;
  established_ = shut_ = kernel_tx_ = false;
}

tls_session::handover tls_session::kernel_tx_keys(ktls_keys& out) const {
  if (track_ == nullptr) {
    return handover::never;
  }
  if (!established_) {
    return handover::later;
  }
  const SSL_CIPHER* cipher = SSL_get_current_cipher(ssl_);
  if (SSL_version(ssl_) != TLS1_3_VERSION || cipher == nullptr || track_->updated ||
      track_->secret_len == 0 || SSL_get_key_update_type(ssl_) != SSL_KEY_UPDATE_NONE) {
    return handover::never;
  }
  if (pending_output() > 0) {
    return handover::later;
  }
  if (!ktls_derive(SSL_CIPHER_get_protocol_id(cipher), track_->secret, track_->secret_len, out)) {
    return handover::never;
  }
  out.seq = track_->seq;
  return handover::ready;
}

void tls_session::kernel_tx_taken() noexcept {
  kernel_tx_dropped();
  kernel_tx_ = true;
}

void tls_session::kernel_tx_dropped() noexcept {
  if (track_ == nullptr) {
    return;
  }
  SSL_set_msg_callback(ssl_, nullptr);
  SSL_set_msg_callback_arg(ssl_, nullptr);
  SSL_set_ex_data(ssl_, track_index(), nullptr);
  delete track_;
  track_ = nullptr;
}

bool tls_session::kernel_tx_stuck() const noexcept {
  return kernel_tx_ &&
         (pending_output() > 0 || SSL_get_key_update_type(ssl_) != SSL_KEY_UPDATE_NONE);
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
  if (kernel_tx_) {
    return false;  // the kernel writes this session's records now
  }
  size_t w = 0;
  ERR_clear_error();
  if (SSL_write_ex(ssl_, data, n, &w) != 1 || w != n) {
    ERR_clear_error();
    return false;
  }
  return true;
}

void tls_session::shutdown() {
  if (shut_ || !established_) {
    return;
  }
  if (!kernel_tx_) {  // with the kernel transmitting, the core sends the alert through it
    SSL_shutdown(ssl_);
    ERR_clear_error();
  }
  shut_ = true;
}

size_t tls_session::pending_output() const noexcept {
  return ssl_ != nullptr ? BIO_ctrl_pending(SSL_get_wbio(ssl_)) : 0;
}

size_t tls_session::take_output(char* dst, size_t cap) {
  const int n = BIO_read(SSL_get_wbio(ssl_), dst, static_cast<int>(cap));
  return n > 0 ? static_cast<size_t>(n) : 0;
}

}  // namespace tollgate::net::detail
