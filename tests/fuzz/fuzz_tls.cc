// libFuzzer target for the TLS record feed: bytes as a core's receives would hand them to a
// connection's net::detail::tls_session (OpenSSL over memory BIOs), in chunks, with a handshake
// step after each and, once established, every readable record read and an answer written back.
// The first byte picks where the fuzzed bytes start:
//   0: from the first byte of the connection (garbage, plain HTTP, truncated hellos);
//   1: after a real client's ClientHello (fuzzed later flights);
//   2: after a complete TLS 1.3 handshake with a real client (fuzzed application records).
// and whether the session follows its keys for a kTLS handover ((first byte / 3) % 4: 1 and 2
// track; 2 also hands over as soon as it can, as the core would, after which the session only
// reads, and a session stuck owing the peer a record ends the feed).
// Beyond "no crash, no sanitizer report": a failed handshake or a broken stream ends the feed
// (the core closes the connection then), take_output never hands more than pending_output,
// and unread input before the handshake never passes the session's bound.
#include <openssl/ssl.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "net/ktls.h"
#include "net/tls_pair.h"
#include "net/tls_session.h"

namespace {

using tollgate::net::tls_context;
using tollgate::net::tls_failure;
using tollgate::net::detail::ktls_keys;
using tollgate::net::detail::tls_session;

void require(bool cond) {
  if (!cond) {
    __builtin_trap();
  }
}

// One context for the whole run, on a pair made at start.
tls_context& context() {
  static tollgate::net::testing::tls_pair pair("fuzz");
  static std::shared_ptr<tls_context> ctx = [] {
    auto c = tls_context::create(pair.cert, pair.key, "1.2");
    if (!c) {
      std::abort();
    }
    tollgate::net::detail::capture_tx_secrets((*c)->current());  // acts on tracking sessions
    return std::move(*c);
  }();
  return *ctx;
}

std::string drain(tls_session& s) {
  const size_t pend = s.pending_output();
  std::string out(pend, '\0');
  const size_t n = s.take_output(out.data(), out.size());
  require(n <= pend);
  out.resize(n);
  return out;
}

// A real client over memory BIOs, driven until it has sent `flights` flights.
struct client {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  client() {
    BIO* rb = BIO_new(BIO_s_mem());
    BIO* wb = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(rb, -1);
    BIO_set_mem_eof_return(wb, -1);
    SSL_set_bio(ssl, rb, wb);
    SSL_set_connect_state(ssl);
    SSL_set_min_proto_version(ssl, TLS1_3_VERSION);
  }
  ~client() {
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
  std::string output() {
    std::string b(BIO_ctrl_pending(SSL_get_wbio(ssl)), '\0');
    if (!b.empty()) {
      BIO_read(SSL_get_wbio(ssl), b.data(), static_cast<int>(b.size()));
    }
    return b;
  }
  void input(const std::string& b) {
    if (!b.empty()) {
      BIO_write(SSL_get_rbio(ssl), b.data(), static_cast<int>(b.size()));
    }
  }
};

// The core's handover step (core::hand_tx_to_kernel), minus the setsockopt: with `hand_over`,
// a ready session is marked as taken by the kernel.
void maybe_hand_over(tls_session& s, bool hand_over) {
  if (!s.kernel_tx_pending() || !s.established()) {
    return;
  }
  ktls_keys k;
  const tls_session::handover h = s.kernel_tx_keys(k);
  if (h == tls_session::handover::never || (h == tls_session::handover::ready && !hand_over)) {
    s.kernel_tx_dropped();
  } else if (h == tls_session::handover::ready) {
    require(k.key_len == 16 || k.key_len == 32);
    s.kernel_tx_taken();
    require(s.kernel_tx() && !s.kernel_tx_pending());
  }
}

// Feeds `data` in chunks whose sizes the bytes themselves pick; false once the core would close.
bool feed_all(tls_session& s, const uint8_t* data, size_t size, bool hand_over) {
  char plain[16384];
  size_t i = 0;
  while (i < size) {
    const size_t want = 1 + (data[i] % 97) * 23;  // 1 .. 2,209 bytes, as receives vary
    ++i;
    const size_t n = want < size - i ? want : size - i;
    if (!s.feed(reinterpret_cast<const char*>(data + i), n)) {
      return false;  // past the handshake bound (or no memory): closed as not TLS
    }
    i += n;
    if (!s.established()) {
      tls_failure why = tls_failure::other;
      const tls_session::step st = s.handshake(why);
      drain(s);
      if (st == tls_session::step::failed) {
        return false;
      }
      if (st == tls_session::step::more) {
        continue;
      }
    }
    for (;;) {
      size_t got = 0;
      const tls_session::read_result r = s.read(plain, sizeof plain, got);
      if (r == tls_session::read_result::data) {
        require(got > 0 && got <= sizeof plain);
        if (s.kernel_tx()) {
          require(!s.write(plain, 1));  // the kernel writes this session's records now
          continue;
        }
        if (!s.write(plain, got < 64 ? got : 64)) {  // an answer, as the engine would
          return false;
        }
        continue;
      }
      if (r != tls_session::read_result::more) {
        return false;  // close_notify or a bad record: the core ends the stream
      }
      break;
    }
    if (s.kernel_tx_stuck()) {
      return false;  // owes the peer a record only OpenSSL could write: the core closes
    }
    drain(s);
    maybe_hand_over(s, hand_over);
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const int mode = data[0] % 3;
  const int keys = (data[0] / 3) % 4;
  tls_session s;
  require(s.open(context().current(), keys == 1 || keys == 2));
  if (mode >= 1) {
    client c;
    SSL_do_handshake(c.ssl);
    const std::string hello = c.output();
    require(s.feed(hello.data(), hello.size()));
    tls_failure why = tls_failure::other;
    require(s.handshake(why) == tls_session::step::more);
    if (mode == 2) {
      c.input(drain(s));
      require(SSL_do_handshake(c.ssl) == 1);
      const std::string fin = c.output();
      require(s.feed(fin.data(), fin.size()));
      require(s.handshake(why) == tls_session::step::done);
      drain(s);
      maybe_hand_over(s, keys == 2);
      require(keys != 2 || s.kernel_tx());  // a TLS 1.3 session with its ticket sent: ready
    }
  }
  feed_all(s, data + 1, size - 1, keys == 2);
  s.shutdown();
  drain(s);
  return 0;
}
