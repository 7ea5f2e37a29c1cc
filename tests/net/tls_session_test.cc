// net::detail::tls_session without a ring: an OpenSSL client over memory BIOs talks to it
// byte for byte, as the core's receives and sends would carry them. A handshake (1.2 and 1.3),
// data both ways, close_notify both ways, and each refusal with the reason /metrics counts:
// plain HTTP, an old protocol, a flood of bytes before any handshake. (Resumption by ticket:
// integration.https, with openssl s_client across cores.)
#include "net/tls_session.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <string>

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

}  // namespace
}  // namespace tollgate::net::detail
