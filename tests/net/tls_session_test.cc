// net::detail::tls_session without a ring: an OpenSSL client over memory BIOs talks to it
// byte for byte, as the core's receives and sends would carry them. A handshake (1.2 and 1.3),
// data both ways, close_notify both ways, and each refusal with the reason /metrics counts:
// plain HTTP, an old protocol, a flood of bytes before any handshake. (Resumption by ticket:
// integration.https, with openssl s_client across cores.) And the kTLS handover's parameters,
// checked the way the kernel would use them (emulated_kernel_tx below): this host's kernel has
// no tls ULP, so the kernel itself cannot run here.
#include "net/tls_session.h"

#include <gtest/gtest.h>
#include <linux/tls.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <cstring>
#include <string>
#include <vector>

#include "net/ktls.h"
#include "net/tls_pair.h"

namespace tollgate::net::detail {
namespace {

// An in-memory client: what it writes goes to the session, what the session writes comes back.
struct mem_client {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = nullptr;
  explicit mem_client(int min_v = TLS1_2_VERSION, int max_v = TLS1_3_VERSION,
                      SSL_SESSION* resume = nullptr) {
    SSL_CTX_set_min_proto_version(ctx, min_v);
    SSL_CTX_set_max_proto_version(ctx, max_v);
    ssl = SSL_new(ctx);
    BIO* rb = BIO_new(BIO_s_mem());
    BIO* wb = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(rb, -1);
    BIO_set_mem_eof_return(wb, -1);
    SSL_set_bio(ssl, rb, wb);
    SSL_set_connect_state(ssl);
    if (resume != nullptr) {
      SSL_set_session(ssl, resume);
    }
  }
  ~mem_client() {
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
  // Client output → session input.
  bool send_to(tls_session& s) {
    std::string buf(BIO_ctrl_pending(SSL_get_wbio(ssl)), '\0');
    if (buf.empty()) {
      return true;
    }
    BIO_read(SSL_get_wbio(ssl), buf.data(), static_cast<int>(buf.size()));
    return s.feed(buf.data(), buf.size());
  }
  // Session output → client input.
  void take_from(tls_session& s) {
    std::string buf(s.pending_output(), '\0');
    buf.resize(s.take_output(buf.data(), buf.size()));
    BIO_write(SSL_get_rbio(ssl), buf.data(), static_cast<int>(buf.size()));
  }
  // Drives both sides until the handshake ends either way; the server's last step.
  tls_session::step handshake(tls_session& s, tls_failure& why) {
    tls_session::step st = tls_session::step::more;
    for (int i = 0; i < 10 && st == tls_session::step::more; ++i) {
      SSL_do_handshake(ssl);
      if (!send_to(s)) {
        return tls_session::step::failed;
      }
      st = s.handshake(why);
      take_from(s);
    }
    SSL_do_handshake(ssl);  // the client's last step (TLS 1.2: the server's Finished)
    return st;
  }
  std::string read_plain() {
    std::string out;
    char buf[4096];
    size_t got = 0;
    while (SSL_read_ex(ssl, buf, sizeof buf, &got) == 1) {
      out.append(buf, got);
    }
    return out;
  }
};

class tls_session_test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = tls_context::create(pair_.cert, pair_.key, "1.2");
    ASSERT_TRUE(c) << c.error();
    ctx_ = std::move(*c);
  }
  testing::tls_pair pair_{"session"};
  std::shared_ptr<tls_context> ctx_;
};

TEST_F(tls_session_test, a_handshake_then_data_both_ways_and_close_notify_both_ways) {
  // Verifies TLS 1.3 and 1.2 each: the handshake completes, a request the client writes is read
  // as plaintext, an answer the session writes reaches the client, the session's close_notify
  // reaches the client, and the client's close_notify reads as peer_closed.
  for (const int v : {TLS1_3_VERSION, TLS1_2_VERSION}) {
    tls_session s;
    ASSERT_TRUE(s.open(ctx_->current()));
    mem_client c(v, v);
    tls_failure why = tls_failure::other;
    ASSERT_EQ(c.handshake(s, why), tls_session::step::done);
    EXPECT_TRUE(s.established());
    EXPECT_EQ(s.tls13(), v == TLS1_3_VERSION);
    EXPECT_EQ(s.version(), v == TLS1_3_VERSION ? "TLSv1.3" : "TLSv1.2");
    EXPECT_FALSE(s.resumed());

    const std::string req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(SSL_write(c.ssl, req.data(), static_cast<int>(req.size())),
              static_cast<int>(req.size()));
    ASSERT_TRUE(c.send_to(s));
    std::string got;
    char buf[512];
    for (;;) {
      size_t n = 0;
      const auto r = s.read(buf, sizeof buf, n);
      if (r != tls_session::read_result::data) {
        EXPECT_EQ(r, tls_session::read_result::more);
        break;
      }
      got.append(buf, n);
    }
    EXPECT_EQ(got, req);

    const std::string answer(20000, 'a');  // more than one record
    ASSERT_TRUE(s.write(answer.data(), answer.size()));
    s.shutdown();
    EXPECT_TRUE(s.shut());
    c.take_from(s);
    EXPECT_EQ(c.read_plain(), answer);
    EXPECT_EQ(SSL_get_error(c.ssl, 0), SSL_ERROR_ZERO_RETURN);  // the close_notify arrived

    SSL_shutdown(c.ssl);
    ASSERT_TRUE(c.send_to(s));
    size_t n = 0;
    EXPECT_EQ(s.read(buf, sizeof buf, n), tls_session::read_result::peer_closed);
  }
}

TEST_F(tls_session_test, plain_http_is_refused_as_not_tls_with_an_alert_pending) {
  tls_session s;
  ASSERT_TRUE(s.open(ctx_->current()));
  const std::string plain = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(s.feed(plain.data(), plain.size()));
  tls_failure why = tls_failure::other;
  EXPECT_EQ(s.handshake(why), tls_session::step::failed);
  EXPECT_EQ(why, tls_failure::not_tls);
  EXPECT_FALSE(s.established());
}

TEST_F(tls_session_test, a_client_that_offers_only_tls_1_1_is_refused_as_protocol_version) {
  tls_session s;
  ASSERT_TRUE(s.open(ctx_->current()));
  mem_client c(TLS1_1_VERSION, TLS1_1_VERSION);
  SSL_set_security_level(c.ssl, 0);  // let the client offer 1.1 at all
  SSL_do_handshake(c.ssl);           // its ClientHello
  ASSERT_TRUE(c.send_to(s));
  tls_failure why = tls_failure::other;
  EXPECT_EQ(s.handshake(why), tls_session::step::failed);
  EXPECT_EQ(why, tls_failure::protocol_version);
  EXPECT_GT(s.pending_output(), 0u);  // the alert, which the core sends before closing
}

TEST_F(tls_session_test, input_past_the_handshake_bound_is_refused_and_a_closed_session_is_inert) {
  tls_session s;
  ASSERT_TRUE(s.open(ctx_->current()));
  const std::string chunk(tls_session::kMaxHandshakeBytes / 2, '\x16');
  EXPECT_TRUE(s.feed(chunk.data(), chunk.size()));
  EXPECT_TRUE(s.feed(chunk.data(), chunk.size()));
  EXPECT_FALSE(s.feed("x", 1));  // one byte past the bound
  s.close();
  EXPECT_FALSE(s.is_open());
  EXPECT_EQ(s.pending_output(), 0u);
  EXPECT_EQ(s.version(), "");
  tls_session moved;
  ASSERT_TRUE(moved.open(ctx_->current()));
  s = std::move(moved);  // conn slots move sessions; the moved-from one is closed
  EXPECT_TRUE(s.is_open());
  EXPECT_FALSE(moved.is_open());  // NOLINT(bugprone-use-after-move): the point of the check
}

// The kernel's TLS 1.3 transmit side, emulated from the bytes the core passes to
// setsockopt(SOL_TLS, TLS_TX): key, salt, IV and sequence number are read out of the kernel's
// tls12_crypto_info_* struct, and records are written as RFC 8446 section 5.2 says (nonce = the
// 12-byte IV xor the sequence number, additional data = the record header, the inner content
// type after the data).
struct emulated_kernel_tx {
  const char* cipher = nullptr;
  std::vector<unsigned char> key;
  unsigned char iv[12] = {};
  uint64_t seq = 0;

  emulated_kernel_tx(const unsigned char* info, size_t len) {
    tls_crypto_info head{};
    std::memcpy(&head, info, sizeof head);
    EXPECT_EQ(head.version, TLS_1_3_VERSION);
    auto gcm = [&](auto ci, const char* name) {
      EXPECT_EQ(len, sizeof ci);
      std::memcpy(&ci, info, sizeof ci);
      cipher = name;
      key.assign(ci.key, ci.key + sizeof ci.key);
      std::memcpy(iv, ci.salt, 4);
      std::memcpy(iv + 4, ci.iv, 8);
      read_seq(ci.rec_seq);
    };
    switch (head.cipher_type) {
      case TLS_CIPHER_AES_GCM_128:
        gcm(tls12_crypto_info_aes_gcm_128{}, "AES-128-GCM");
        break;
      case TLS_CIPHER_AES_GCM_256:
        gcm(tls12_crypto_info_aes_gcm_256{}, "AES-256-GCM");
        break;
      case TLS_CIPHER_CHACHA20_POLY1305: {
        tls12_crypto_info_chacha20_poly1305 ci{};
        EXPECT_EQ(len, sizeof ci);
        std::memcpy(&ci, info, sizeof ci);
        cipher = "ChaCha20-Poly1305";
        key.assign(ci.key, ci.key + sizeof ci.key);
        std::memcpy(iv, ci.iv, 12);
        read_seq(ci.rec_seq);
        break;
      }
      default:
        ADD_FAILURE() << "cipher type " << head.cipher_type;
    }
  }
  void read_seq(const unsigned char* be) {
    for (int i = 0; i < 8; ++i) {
      seq = seq << 8 | be[i];
    }
  }
  // One record of inner content type `type` (23 data, 21 alert).
  std::string record(uint8_t type, std::string_view data) {
    std::string inner(data);
    inner.push_back(static_cast<char>(type));
    const size_t len = inner.size() + 16;
    const unsigned char head[5] = {23, 3, 3, static_cast<unsigned char>(len >> 8),
                                   static_cast<unsigned char>(len)};
    unsigned char nonce[12];
    std::memcpy(nonce, iv, 12);
    for (int i = 0; i < 8; ++i) {
      nonce[11 - i] ^= static_cast<unsigned char>(seq >> (8 * i));
    }
    std::string out(reinterpret_cast<const char*>(head), 5);
    out.resize(5 + len);
    auto* body = reinterpret_cast<unsigned char*>(out.data() + 5);
    EVP_CIPHER* c = EVP_CIPHER_fetch(nullptr, cipher, nullptr);
    EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
    int n = 0;
    EXPECT_EQ(EVP_EncryptInit_ex2(ctx, c, key.data(), nonce, nullptr), 1);
    EXPECT_EQ(EVP_EncryptUpdate(ctx, nullptr, &n, head, 5), 1);
    EXPECT_EQ(EVP_EncryptUpdate(ctx, body, &n, reinterpret_cast<const unsigned char*>(inner.data()),
                                static_cast<int>(inner.size())),
              1);
    EXPECT_EQ(EVP_EncryptFinal_ex(ctx, body + n, &n), 1);
    EXPECT_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, body + inner.size()), 1);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    ++seq;
    return out;
  }
};

// A key-tracking session whose context captures secrets, as the core opens them where kTLS is on.
class ktls_handover_test : public tls_session_test {
 protected:
  void SetUp() override {
    tls_session_test::SetUp();
    capture_tx_secrets(ctx_->current());
  }
  // What the client reads after `bytes` (the emulated kernel's records) arrive.
  static std::string deliver(mem_client& c, const std::string& bytes) {
    BIO_write(SSL_get_rbio(c.ssl), bytes.data(), static_cast<int>(bytes.size()));
    return c.read_plain();
  }
  // The plaintext the session reads after the client wrote `text`.
  static std::string relay(mem_client& c, tls_session& s, std::string_view text) {
    EXPECT_EQ(SSL_write(c.ssl, text.data(), static_cast<int>(text.size())),
              static_cast<int>(text.size()));
    EXPECT_TRUE(c.send_to(s));
    std::string got;
    char buf[512];
    size_t n = 0;
    while (s.read(buf, sizeof buf, n) == tls_session::read_result::data) {
      got.append(buf, n);
    }
    return got;
  }
};

TEST(ktls_test, key_and_iv_match_rfc_8448_and_the_kernel_struct_splits_the_iv_into_salt_and_iv) {
  // RFC 8448 section 3 (simple 1-RTT, TLS_AES_128_GCM_SHA256): the server's application traffic
  // secret and the write key and IV derived from it.
  const unsigned char secret[32] = {0xa1, 0x1a, 0xf9, 0xf0, 0x55, 0x31, 0xf8, 0x56,
                                    0xad, 0x47, 0x11, 0x6b, 0x45, 0xa9, 0x50, 0x32,
                                    0x82, 0x04, 0xb4, 0xf4, 0x4b, 0xfb, 0x6b, 0x3a,
                                    0x4b, 0x4f, 0x1f, 0x3f, 0xcb, 0x63, 0x16, 0x43};
  const unsigned char want_key[16] = {0x9f, 0x02, 0x28, 0x3b, 0x6c, 0x9c, 0x07, 0xef,
                                      0xc2, 0x6b, 0xb9, 0xf2, 0xac, 0x92, 0xe3, 0x56};
  const unsigned char want_iv[12] = {0xcf, 0x78, 0x2b, 0x88, 0xdd, 0x83,
                                     0x54, 0x9a, 0xad, 0xf1, 0xe9, 0x84};
  ktls_keys k;
  ASSERT_TRUE(ktls_derive(0x1301, secret, sizeof secret, k));
  EXPECT_EQ(k.cipher_type, TLS_CIPHER_AES_GCM_128);
  EXPECT_EQ(k.key_len, 16);
  EXPECT_EQ(std::memcmp(k.key, want_key, 16), 0);
  EXPECT_EQ(std::memcmp(k.iv, want_iv, 12), 0);

  k.seq = 0x0102030405060708;
  unsigned char info[ktls_info_max];
  ASSERT_EQ(ktls_crypto_info(k, info), sizeof(tls12_crypto_info_aes_gcm_128));
  tls12_crypto_info_aes_gcm_128 ci{};
  std::memcpy(&ci, info, sizeof ci);
  EXPECT_EQ(ci.info.version, TLS_1_3_VERSION);
  EXPECT_EQ(std::memcmp(ci.key, want_key, 16), 0);
  EXPECT_EQ(std::memcmp(ci.salt, want_iv, 4), 0);
  EXPECT_EQ(std::memcmp(ci.iv, want_iv + 4, 8), 0);
  const unsigned char want_seq[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(std::memcmp(ci.rec_seq, want_seq, 8), 0);

  ktls_keys wrong;
  EXPECT_FALSE(ktls_derive(0x1301, secret, 31, wrong));  // not the suite's hash length
  EXPECT_FALSE(ktls_derive(0x1304, secret, 32, wrong));  // AES-CCM: not offered here
}

TEST_F(ktls_handover_test, each_tls13_suite_hands_over_records_the_peer_reads_in_sequence) {
  // Verifies, for each TLS 1.3 suite, handing over right after the handshake and after records
  // written in user space: the parameters let the (emulated) kernel write records the client
  // decrypts, in sequence after the ticket and any earlier records; a close_notify sent as the
  // kernel's control record ends the stream; input still goes through the session, and the
  // session refuses to write once the kernel does.
  for (const char* suite :
       {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}) {
    for (const bool user_space_first : {false, true}) {
      SCOPED_TRACE(std::string(suite) + (user_space_first ? " after user-space records" : ""));
      tls_session s;
      ASSERT_TRUE(s.open(ctx_->current(), true));
      EXPECT_TRUE(s.kernel_tx_pending());
      mem_client c(TLS1_3_VERSION, TLS1_3_VERSION);
      ASSERT_EQ(SSL_set_ciphersuites(c.ssl, suite), 1);
      tls_failure why = tls_failure::other;
      ASSERT_EQ(c.handshake(s, why), tls_session::step::done);
      ktls_keys k;
      if (user_space_first) {
        const std::string early(20000, 'u');  // two records
        ASSERT_TRUE(s.write(early.data(), early.size()));
        EXPECT_EQ(s.kernel_tx_keys(k), tls_session::handover::later);  // not sent yet
        c.take_from(s);
        EXPECT_EQ(c.read_plain(), early);
      }
      ASSERT_EQ(s.kernel_tx_keys(k), tls_session::handover::ready);
      unsigned char info[ktls_info_max];
      const size_t len = ktls_crypto_info(k, info);
      s.kernel_tx_taken();
      EXPECT_TRUE(s.kernel_tx());
      EXPECT_FALSE(s.kernel_tx_pending());

      emulated_kernel_tx kernel(info, len);
      std::string two = kernel.record(23, "HTTP/1.1 200 OK\r\n");
      two += kernel.record(23, "\r\n");
      EXPECT_EQ(deliver(c, two), "HTTP/1.1 200 OK\r\n\r\n");
      EXPECT_EQ(relay(c, s, "GET / HTTP/1.1\r\n\r\n"), "GET / HTTP/1.1\r\n\r\n");
      EXPECT_FALSE(s.kernel_tx_stuck());
      EXPECT_FALSE(s.write("x", 1));
      s.shutdown();  // marks it; the core sends the alert through the kernel
      EXPECT_TRUE(s.shut());
      EXPECT_EQ(s.pending_output(), 0u);
      EXPECT_EQ(deliver(c, kernel.record(21, std::string("\x01\x00", 2))), "");
      EXPECT_EQ(SSL_get_error(c.ssl, 0), SSL_ERROR_ZERO_RETURN);
    }
  }
}

TEST_F(ktls_handover_test, a_session_resumed_by_ticket_hands_over_too) {
  // Verifies the count restarts at the resumed handshake's Finished (no certificate flight).
  SSL_SESSION* ticket = nullptr;
  {
    tls_session s;
    ASSERT_TRUE(s.open(ctx_->current(), true));
    mem_client c(TLS1_3_VERSION, TLS1_3_VERSION);
    tls_failure why = tls_failure::other;
    ASSERT_EQ(c.handshake(s, why), tls_session::step::done);
    c.read_plain();  // takes the ticket
    ticket = SSL_get1_session(c.ssl);
    SSL_shutdown(c.ssl);  // freed without a close_notify, the session would not resume
  }
  ASSERT_NE(ticket, nullptr);
  tls_session s;
  ASSERT_TRUE(s.open(ctx_->current(), true));
  mem_client c(TLS1_3_VERSION, TLS1_3_VERSION, ticket);
  tls_failure why = tls_failure::other;
  ASSERT_EQ(c.handshake(s, why), tls_session::step::done);
  EXPECT_TRUE(s.resumed());
  ktls_keys k;
  ASSERT_EQ(s.kernel_tx_keys(k), tls_session::handover::ready);
  unsigned char info[ktls_info_max];
  emulated_kernel_tx kernel(info, ktls_crypto_info(k, info));
  s.kernel_tx_taken();
  EXPECT_EQ(deliver(c, kernel.record(23, "resumed")), "resumed");
  SSL_SESSION_free(ticket);
}

TEST_F(ktls_handover_test, tls12_and_untracked_sessions_never_hand_over) {
  ktls_keys k;
  tls_session s12;
  ASSERT_TRUE(s12.open(ctx_->current(), true));
  mem_client c12(TLS1_2_VERSION, TLS1_2_VERSION);
  tls_failure why = tls_failure::other;
  ASSERT_EQ(c12.handshake(s12, why), tls_session::step::done);
  ASSERT_TRUE(s12.write("x", 1));
  EXPECT_EQ(s12.kernel_tx_keys(k), tls_session::handover::never);  // said at once, output or not
  c12.take_from(s12);
  EXPECT_EQ(c12.read_plain(), "x");
  s12.kernel_tx_dropped();
  EXPECT_FALSE(s12.kernel_tx_pending());
  EXPECT_EQ(relay(c12, s12, "still user space"), "still user space");

  tls_session plain;
  ASSERT_TRUE(plain.open(ctx_->current()));
  EXPECT_FALSE(plain.kernel_tx_pending());
  mem_client c(TLS1_3_VERSION, TLS1_3_VERSION);
  ASSERT_EQ(c.handshake(plain, why), tls_session::step::done);
  EXPECT_EQ(plain.kernel_tx_keys(k), tls_session::handover::never);
}

TEST_F(ktls_handover_test, a_key_update_the_peer_asks_for_never_goes_to_the_kernel) {
  // Verifies: before the handover, a session that owes the peer a KeyUpdate stays in user
  // space (the kernel would get a stale key); after it, the session reports itself stuck (only
  // OpenSSL could write the KeyUpdate), and the core closes it.
  for (const bool handed_over : {false, true}) {
    SCOPED_TRACE(handed_over ? "after the handover" : "before the handover");
    tls_session s;
    ASSERT_TRUE(s.open(ctx_->current(), true));
    mem_client c(TLS1_3_VERSION, TLS1_3_VERSION);
    tls_failure why = tls_failure::other;
    ASSERT_EQ(c.handshake(s, why), tls_session::step::done);
    ktls_keys k;
    if (handed_over) {
      ASSERT_EQ(s.kernel_tx_keys(k), tls_session::handover::ready);
      s.kernel_tx_taken();
    }
    ASSERT_EQ(SSL_key_update(c.ssl, SSL_KEY_UPDATE_REQUESTED), 1);
    EXPECT_EQ(relay(c, s, "after the update"), "after the update");
    if (handed_over) {
      EXPECT_TRUE(s.kernel_tx_stuck());
    } else {
      c.take_from(s);
      EXPECT_EQ(s.kernel_tx_keys(k), tls_session::handover::never);
    }
  }
}

}  // namespace
}  // namespace tollgate::net::detail
