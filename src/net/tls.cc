// The process's TLS server context (see include/tollgate/net/tls.h): certificate loading and
// checks, the allowed protocol surface, ALPN, ticket keys derived per 12-hour window, reload by
// building a new context and publishing it atomically, and the kTLS probe.
#include "tollgate/net/tls.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <vector>

#include "fmt/format.h"
#include "net/ktls.h"
#include "net/tls_session.h"

namespace tollgate::net {

namespace {

constexpr int64_t kTicketWindowSecs = 12 * 3600;

// 32 random bytes drawn once per process: every context (and every core) derives the same
// ticket keys from it, so a ticket issued by one core resumes on another, and after a reload.
const unsigned char* ticket_master() {
  static unsigned char secret[32];
  static std::once_flag once;
  std::call_once(once, [] {
    if (RAND_bytes(secret, sizeof secret) != 1) {
      std::fputs("tollgate: RAND_bytes failed\n", stderr);
      std::abort();
    }
  });
  return secret;
}

struct ticket_keys {
  int64_t window = -1;
  unsigned char name[16];
  unsigned char aes[32];
  unsigned char hmac[32];
};

// name[0,8) = the window (big-endian), name[8,16), the AES key and the HMAC key come from
// HMAC-SHA256(master, label || window). Deterministic: no state is shared between threads.
bool derive(int64_t window, ticket_keys& k) {
  unsigned char msg[17];
  for (int i = 0; i < 8; ++i) {
    msg[i] = static_cast<unsigned char>(static_cast<uint64_t>(window) >> (56 - 8 * i));
  }
  std::memcpy(k.name, msg, 8);
  unsigned char out[32];
  size_t len = 0;
  const char* labels[3] = {"tollgate-tkt-nam", "tollgate-tkt-aes", "tollgate-tkt-mac"};
  unsigned char* dst[3] = {k.name + 8, k.aes, k.hmac};
  const size_t sizes[3] = {8, 32, 32};
  for (int j = 0; j < 3; ++j) {
    unsigned char buf[16 + 8];
    std::memcpy(buf, labels[j], 16);
    std::memcpy(buf + 16, msg, 8);
    if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, ticket_master(), 32, buf, sizeof buf,
                  out, sizeof out, &len) == nullptr) {
      return false;
    }
    std::memcpy(dst[j], out, sizes[j]);
  }
  k.window = window;
  return true;
}

// Per thread, the keys of the two windows in use (computed once per window per thread).
const ticket_keys* keys_for(int64_t window) {
  thread_local ticket_keys cache[2];
  ticket_keys& slot = cache[static_cast<uint64_t>(window) & 1];
  if (slot.window != window && !derive(window, slot)) {
    return nullptr;
  }
  return &slot;
}

bool set_mac(EVP_MAC_CTX* hctx, const ticket_keys& k) {
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_octet_string(
                             OSSL_MAC_PARAM_KEY, const_cast<unsigned char*>(k.hmac), sizeof k.hmac),
                         OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_END};
  return EVP_MAC_CTX_set_params(hctx, params) == 1;
}

// AES-256-CBC for tickets, fetched once per thread: EVP_aes_256_cbc() is a legacy handle that
// OpenSSL 3 resolves to its provider by name at every init (a lookup under the provider lock on
// each resumed handshake). Threads never share it; it lives as long as the thread.
const EVP_CIPHER* ticket_cipher() {
  thread_local struct fetched {
    EVP_CIPHER* c = EVP_CIPHER_fetch(nullptr, "AES-256-CBC", nullptr);
    ~fetched() { EVP_CIPHER_free(c); }
  } f;
  return f.c;
}

// SSL_CTX_set_tlsext_ticket_key_evp_cb: 1 = ok, 2 = ok but issue a fresh ticket, 0 = unknown key
// (full handshake), -1 = error.
int ticket_cb(SSL*, unsigned char key_name[16], unsigned char* iv, EVP_CIPHER_CTX* cctx,
              EVP_MAC_CTX* hctx, int enc) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr)) / kTicketWindowSecs;
  if (enc == 1) {
    const ticket_keys* k = keys_for(now);
    if (k == nullptr || RAND_bytes(iv, 16) != 1) {
      return -1;
    }
    std::memcpy(key_name, k->name, 16);
    const EVP_CIPHER* aes = ticket_cipher();
    if (aes == nullptr || EVP_EncryptInit_ex(cctx, aes, nullptr, k->aes, iv) != 1 ||
        !set_mac(hctx, *k)) {
      return -1;
    }
    return 1;
  }
  int64_t window = 0;
  for (int i = 0; i < 8; ++i) {
    window = (window << 8) | key_name[i];
  }
  if (window != now && window != now - 1) {
    return 0;  // too old (or from the future): a full handshake
  }
  const ticket_keys* k = keys_for(window);
  if (k == nullptr || std::memcmp(k->name, key_name, 16) != 0) {
    return 0;
  }
  const EVP_CIPHER* aes = ticket_cipher();
  if (aes == nullptr || EVP_DecryptInit_ex(cctx, aes, nullptr, k->aes, iv) != 1 ||
      !set_mac(hctx, *k)) {
    return -1;
  }
  return window == now ? 1 : 2;
}

int alpn_cb(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
            unsigned int inlen, void*) {
  static const unsigned char kOurs[] = "\x08http/1.1";
  unsigned char* sel = nullptr;
  if (SSL_select_next_proto(&sel, outlen, kOurs, sizeof kOurs - 1, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;  // no ALPN agreed: HTTP/1.1 is still what we speak
  }
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

std::string openssl_error() {
  unsigned long e = 0;
  unsigned long last = 0;
  while ((e = ERR_get_error()) != 0) {
    last = e;
  }
  if (last == 0) {
    return "unknown error";
  }
  char buf[256];
  ERR_error_string_n(last, buf, sizeof buf);
  return buf;
}

std::string readable(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return fmt::format("cannot read TLS {} {}: {}", what, path, std::strerror(errno));
  }
  ::close(fd);
  return {};
}

std::string asn1_text(const ASN1_TIME* t) {
  tm out{};
  if (ASN1_TIME_to_tm(t, &out) != 1) {
    return "?";
  }
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &out);
  return buf;
}

// Builds a context for the pair, or says why not (naming the file).
result<SSL_CTX*, std::string> build(const std::string& cert, const std::string& key, int min_ver,
                                    bool capture = false) {
  if (std::string bad = readable(cert, "certificate"); !bad.empty()) {
    return unexpected(std::move(bad));
  }
  if (std::string bad = readable(key, "key"); !bad.empty()) {
    return unexpected(std::move(bad));
  }
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    return unexpected("SSL_CTX_new: " + openssl_error());
  }
  auto fail = [&](std::string why) -> result<SSL_CTX*, std::string> {
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return unexpected(std::move(why));
  };
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
    return fail(fmt::format("cannot load TLS certificate chain {}: {}", cert, openssl_error()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      return fail(fmt::format("TLS key {} does not match certificate {}", key, cert));
    }
    return fail(fmt::format("cannot load TLS key {}: {}", key, openssl_error()));
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return fail(fmt::format("TLS key {} does not match certificate {}", key, cert));
  }
  X509* leaf = SSL_CTX_get0_certificate(ctx);
  if (leaf == nullptr) {
    return fail(fmt::format("TLS certificate {} holds no certificate", cert));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) <= 0) {
    return fail(
        fmt::format("TLS certificate {} expired on {}", cert, asn1_text(X509_get0_notAfter(leaf))));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
    return fail(fmt::format("TLS certificate {} is not valid before {}", cert,
                            asn1_text(X509_get0_notBefore(leaf))));
  }
  SSL_CTX_set_min_proto_version(ctx, min_ver);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_options(
      ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // TLS 1.2: forward secrecy (ECDHE) and AEAD only. TLS 1.3 suites are all AEAD.
  if (SSL_CTX_set_cipher_list(ctx,
                              "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                              "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
                              "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305") != 1 ||
      SSL_CTX_set_ciphersuites(ctx,
                               "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                               "TLS_CHACHA20_POLY1305_SHA256") != 1 ||
      SSL_CTX_set1_groups_list(ctx, "X25519:P-256:P-384") != 1) {
    return fail("TLS cipher configuration: " + openssl_error());
  }
  SSL_CTX_set_max_early_data(ctx, 0);
  SSL_CTX_set_recv_max_early_data(ctx, 0);
  // Tickets only: no server-side cache to share or lock between cores.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 1);
  static const unsigned char kSid[] = "tollgate";
  SSL_CTX_set_session_id_context(ctx, kSid, sizeof kSid - 1);
  SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb);
  SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, nullptr);
  // An idle connection gives its record buffers back (memory per idle connection).
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  if (capture) {
    detail::capture_tx_secrets(ctx);  // kTLS: the server's traffic secret for the handover
  }
  return ctx;
}

}  // namespace

std::string_view tls_failure_name(tls_failure f) noexcept {
  switch (f) {
    case tls_failure::protocol_version:
      return "protocol_version";
    case tls_failure::no_shared_cipher:
      return "no_shared_cipher";
    case tls_failure::not_tls:
      return "not_tls";
    case tls_failure::incomplete:
      return "incomplete";
    case tls_failure::other:
      return "other";
  }
  return "other";
}

struct tls_context::state {
  std::mutex mu;  // reload() callers only (never taken by a core)
  std::string cert;
  std::string key;
  int min_version = TLS1_2_VERSION;
  std::vector<SSL_CTX*> all;  // every context built, freed with this object
};

result<std::shared_ptr<tls_context>, std::string> tls_context::create(const std::string& cert,
                                                                      const std::string& key,
                                                                      std::string_view min_version,
                                                                      bool ktls) {
  int min_ver = 0;
  if (min_version.empty() || min_version == "1.2") {
    min_ver = TLS1_2_VERSION;
  } else if (min_version == "1.3") {
    min_ver = TLS1_3_VERSION;
  } else {
    return unexpected(
        fmt::format("tls min_version must be \"1.2\" or \"1.3\", not \"{}\"", min_version));
  }
  std::string no_ulp;
  if (ktls) {
    no_ulp = detail::ktls_probe();
  }
  const bool kernel_tx = ktls && no_ulp.empty();
  auto ctx = build(cert, key, min_ver, kernel_tx);
  if (!ctx) {
    return unexpected(std::move(ctx.error()));
  }
  std::shared_ptr<tls_context> t(new tls_context());
  t->st_ = std::make_unique<state>();
  t->st_->cert = cert;
  t->st_->key = key;
  t->st_->min_version = min_ver;
  t->st_->all.push_back(*ctx);
  t->current_.store(*ctx, std::memory_order_release);
  t->kernel_tx_.store(kernel_tx, std::memory_order_relaxed);
  if (!ktls) {
    t->ktls_status_ = "user-space record layer (kTLS off: tls.ktls = false)";
  } else if (!kernel_tx) {
    t->ktls_status_ =
        fmt::format("user-space record layer (the kernel has no tls ULP: {})", no_ulp);
  } else {
    t->ktls_status_ =
        "kernel TLS transmit (the kernel has the tls ULP: a TLS 1.3 session hands its transmit "
        "side to the kernel after the handshake; TLS 1.2 sessions and received records stay in "
        "user space)";
  }
  return t;
}

tls_context::~tls_context() {
  if (st_) {
    for (SSL_CTX* c : st_->all) {
      SSL_CTX_free(c);
    }
  }
}

result<void, std::string> tls_context::reload(const std::string& cert, const std::string& key) {
  std::lock_guard<std::mutex> lock(st_->mu);
  const std::string c = cert.empty() ? st_->cert : cert;
  const std::string k = key.empty() ? st_->key : key;
  auto ctx = build(c, k, st_->min_version, kernel_tx());
  if (!ctx) {
    return unexpected(std::move(ctx.error()));
  }
  st_->cert = c;
  st_->key = k;
  st_->all.push_back(*ctx);
  current_.store(*ctx, std::memory_order_release);
  stats_.reloads.fetch_add(1, std::memory_order_relaxed);
  return {};
}

std::string tls_context::cert_path() const {
  std::lock_guard<std::mutex> lock(st_->mu);
  return st_->cert;
}

void detail::attempt_kernel_tx(tls_context& t) {
  std::lock_guard<std::mutex> lock(t.st_->mu);
  for (SSL_CTX* c : t.st_->all) {
    capture_tx_secrets(c);
  }
  t.kernel_tx_.store(true, std::memory_order_relaxed);
}

std::string check_tls_pair(const std::string& cert, const std::string& key) {
  auto ctx = build(cert, key, TLS1_2_VERSION);
  if (!ctx) {
    return ctx.error();
  }
  SSL_CTX_free(*ctx);
  return {};
}

}  // namespace tollgate::net
