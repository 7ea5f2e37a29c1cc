#include "net/ktls.h"

#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tollgate::net::detail {

namespace {

struct suite_info {
  uint16_t suite;
  uint16_t cipher_type;
  uint8_t key_len;
  uint8_t secret_len;  // the suite's hash length
  const char* digest;
};

constexpr suite_info kSuites[] = {
    {0x1301, TLS_CIPHER_AES_GCM_128, 16, 32, "SHA256"},
    {0x1302, TLS_CIPHER_AES_GCM_256, 32, 48, "SHA384"},
    {0x1303, TLS_CIPHER_CHACHA20_POLY1305, 32, 32, "SHA256"},
};

// HKDF, fetched once per thread (a fetch is a lookup under the provider lock).
EVP_KDF* hkdf() {
  thread_local struct fetched {
    EVP_KDF* k = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
    ~fetched() { EVP_KDF_free(k); }
  } f;
  return f.k;
}

// HKDF-Expand-Label(secret, label, "", len) of RFC 8446 section 7.1: HKDF-Expand with the info
// struct { uint16 length; opaque label<7..255> = "tls13 " + label; opaque context<0..255> = "" }.
bool expand_label(const suite_info& s, const uint8_t* secret, const char* label, uint8_t* out,
                  size_t len) {
  const size_t label_len = std::strlen(label);
  unsigned char info[2 + 1 + 6 + 8 + 1];
  size_t n = 0;
  info[n++] = static_cast<unsigned char>(len >> 8);
  info[n++] = static_cast<unsigned char>(len);
  info[n++] = static_cast<unsigned char>(6 + label_len);
  std::memcpy(info + n, "tls13 ", 6);
  n += 6;
  std::memcpy(info + n, label, label_len);
  n += label_len;
  info[n++] = 0;
  EVP_KDF* kdf = hkdf();
  if (kdf == nullptr) {
    return false;
  }
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  if (ctx == nullptr) {
    return false;
  }
  int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(s.digest), 0),
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret),
                                        s.secret_len),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n), OSSL_PARAM_END};
  const bool ok = EVP_KDF_derive(ctx, out, len, params) == 1;
  EVP_KDF_CTX_free(ctx);
  return ok;
}

void put_be64(unsigned char* dst, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    dst[i] = static_cast<unsigned char>(v);
    v >>= 8;
  }
}

template <class Info>
size_t fill(const ktls_keys& k, Info& ci, unsigned char* out) {
  ci.info.version = TLS_1_3_VERSION;
  ci.info.cipher_type = k.cipher_type;
  std::memcpy(ci.key, k.key, sizeof ci.key);
  // GCM: nonce = (salt || iv) ^ seq; the kernel keeps the IV's first 4 bytes as its salt.
  std::memcpy(ci.salt, k.iv, sizeof ci.salt);
  std::memcpy(ci.iv, k.iv + sizeof ci.salt, sizeof ci.iv);
  put_be64(ci.rec_seq, k.seq);
  std::memcpy(out, &ci, sizeof ci);
  OPENSSL_cleanse(&ci, sizeof ci);
  return sizeof ci;
}

}  // namespace

ktls_keys::~ktls_keys() { OPENSSL_cleanse(key, sizeof key); }

bool ktls_derive(uint16_t suite, const uint8_t* secret, size_t secret_len, ktls_keys& out) {
  for (const suite_info& s : kSuites) {
    if (s.suite != suite) {
      continue;
    }
    if (secret_len != s.secret_len || !expand_label(s, secret, "key", out.key, s.key_len) ||
        !expand_label(s, secret, "iv", out.iv, sizeof out.iv)) {
      OPENSSL_cleanse(out.key, sizeof out.key);
      return false;
    }
    out.cipher_type = s.cipher_type;
    out.key_len = s.key_len;
    return true;
  }
  return false;
}

size_t ktls_crypto_info(const ktls_keys& k, unsigned char* out) noexcept {
  static_assert(sizeof(tls12_crypto_info_aes_gcm_256) <= ktls_info_max);
  static_assert(sizeof(tls12_crypto_info_chacha20_poly1305) <= ktls_info_max);
  switch (k.cipher_type) {
    case TLS_CIPHER_AES_GCM_128: {
      tls12_crypto_info_aes_gcm_128 ci{};
      return fill(k, ci, out);
    }
    case TLS_CIPHER_AES_GCM_256: {
      tls12_crypto_info_aes_gcm_256 ci{};
      return fill(k, ci, out);
    }
    case TLS_CIPHER_CHACHA20_POLY1305: {
      // No salt: the whole 12-byte IV is the kernel's iv.
      tls12_crypto_info_chacha20_poly1305 ci{};
      ci.info.version = TLS_1_3_VERSION;
      ci.info.cipher_type = k.cipher_type;
      std::memcpy(ci.key, k.key, sizeof ci.key);
      std::memcpy(ci.iv, k.iv, sizeof ci.iv);
      put_be64(ci.rec_seq, k.seq);
      std::memcpy(out, &ci, sizeof ci);
      OPENSSL_cleanse(&ci, sizeof ci);
      return sizeof ci;
    }
    default:
      return 0;
  }
}

int ktls_attach_tx(int fd, const ktls_keys& k) noexcept {
  unsigned char info[ktls_info_max];
  const size_t len = ktls_crypto_info(k, info);
  if (len == 0) {
    return EINVAL;
  }
  int err = 0;
  if (::setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof "tls") != 0 ||
      ::setsockopt(fd, SOL_TLS, TLS_TX, info, static_cast<socklen_t>(len)) != 0) {
    err = errno;
  }
  OPENSSL_cleanse(info, sizeof info);
  return err;
}

bool ktls_send_close_notify(int fd) noexcept {
  unsigned char alert[2] = {1, 0};  // warning, close_notify
  iovec iov{alert, sizeof alert};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(unsigned char))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_TLS;
  cm->cmsg_type = TLS_SET_RECORD_TYPE;
  cm->cmsg_len = CMSG_LEN(sizeof(unsigned char));
  *CMSG_DATA(cm) = 21;  // alert
  return ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof alert);
}

std::string ktls_probe() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return std::string("no socket for the probe: ") + std::strerror(errno);
  }
  const int r = ::setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof "tls");
  const int e = errno;
  ::close(fd);
  // The ULP attaches only to a connected socket: ENOTCONN on a fresh one means it exists.
  if (r == 0 || e == ENOTCONN) {
    return {};
  }
  return std::strerror(e);
}

}  // namespace tollgate::net::detail
