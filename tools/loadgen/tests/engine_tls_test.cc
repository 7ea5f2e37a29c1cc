// The engine over TLS (engine_tls.cc) end to end against a small blocking OpenSSL server on
// 127.0.0.1 with a throwaway ECDSA P-256 certificate made here (no key is committed): checked
// answers with pipelining and on every ring feature subset, and a certificate the client does
// not trust failing the handshake instead of being used.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine.h"
#include "stats.h"
#include "tls_client.h"
#include "tool_result.h"
#include "workload.h"

namespace tollgate::loadgen {
namespace {

using test::tool_result;

/// A self-signed ECDSA P-256 certificate for 127.0.0.1 / localhost, valid for an hour, and its
/// PEM in a temporary file (the client's --cacert).
struct test_pair {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  std::string pem_path;

  test_pair() {
    key = EVP_EC_gen("P-256");
    cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
    X509_set_issuer_name(cert, name);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, cert, cert, nullptr, nullptr, 0);
    for (auto [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
                              std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
      X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
      X509_add_ext(cert, ext, -1);
      X509_EXTENSION_free(ext);
    }
    X509_sign(cert, key, EVP_sha256());
    char path[] = "/tmp/loadgen-tls-test-XXXXXX";
    int fd = ::mkstemp(path);
    EXPECT_GE(fd, 0);
    FILE* f = ::fdopen(fd, "w");
    PEM_write_X509(f, cert);
    std::fclose(f);
    pem_path = path;
  }
  ~test_pair() {
    ::unlink(pem_path.c_str());
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

/// Blocking TLS server: one thread per connection, each request answered with a tools/call
/// result echoing its JSON-RPC id. Stops (and joins) in the destructor.
class tls_server {
 public:
  explicit tls_server(const test_pair& pair) {
    std::signal(SIGPIPE, SIG_IGN);  // SSL_write to a client that already closed
    ctx_ = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate(ctx_, pair.cert);
    SSL_CTX_use_PrivateKey(ctx_, pair.key);
    lfd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(lfd_, 128), 0);
    socklen_t len = sizeof addr_;
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&addr_), &len);
    accept_ = std::thread([this] { accept_loop(); });
  }
  ~tls_server() {
    stop_ = true;
    ::shutdown(lfd_, SHUT_RDWR);  // wakes accept()
    accept_.join();
    std::lock_guard<std::mutex> g(mu_);
    for (int fd : fds_) {
      ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : conns_) {
      t.join();
    }
    ::close(lfd_);
    SSL_CTX_free(ctx_);
  }
  const sockaddr_in& addr() const { return addr_; }
  int handshakes() const { return handshakes_.load(); }

 private:
  void accept_loop() {
    while (!stop_) {
      int fd = ::accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        continue;
      }
      std::lock_guard<std::mutex> g(mu_);
      fds_.push_back(fd);
      conns_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    SSL* ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
      handshakes_++;
      std::string b;
      char buf[16384];
      for (;;) {
        int n = SSL_read(ssl, buf, sizeof buf);
        if (n <= 0) {
          break;
        }
        b.append(buf, static_cast<std::size_t>(n));
        std::string out;
        for (std::size_t end; (end = b.find("\r\n\r\n")) != std::string::npos;) {
          std::size_t p = b.find("Content-Length: ");
          std::size_t cl = p != std::string::npos && p < end ? std::stoul(b.substr(p + 16)) : 0;
          if (b.size() < end + 4 + cl) {
            break;
          }
          std::string body = b.substr(end + 4, cl);
          std::size_t id_at = body.find("\"id\":");
          std::string json =
              tool_result(id_at == std::string::npos ? -1 : std::stoll(body.substr(id_at + 5)),
                          false, R"({\"total\":0,\"stories\":[]})");
          out += "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                 std::to_string(json.size()) + "\r\n\r\n" + json;
          b.erase(0, end + 4 + cl);
        }
        if (!out.empty() && SSL_write(ssl, out.data(), static_cast<int>(out.size())) <= 0) {
          break;
        }
      }
    }
    SSL_free(ssl);
    ::shutdown(fd, SHUT_RDWR);
  }

  SSL_CTX* ctx_ = nullptr;
  int lfd_ = -1;
  sockaddr_in addr_{};
  std::atomic<bool> stop_{false};
  std::atomic<int> handshakes_{0};
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> conns_;
  std::thread accept_;
};

/// One load thread over TLS against `srv` until `stop_after` outcomes (20 s safety net).
thread_stats run_tls(const tls_server& srv, const tls_options& opt, unsigned conns, unsigned depth,
                     std::uint64_t stop_after, unsigned features = feat_all) {
  run_config cfg;
  std::memcpy(&cfg.addr, &srv.addr(), sizeof(sockaddr_in));
  cfg.addr_len = sizeof(sockaddr_in);
  cfg.connections = conns;
  cfg.depth = depth;
  cfg.stop_after = stop_after;
  cfg.features = features;
  std::string err;
  cfg.tls = make_tls_client(opt, err);
  EXPECT_NE(cfg.tls, nullptr) << err;
  cfg.tls_host = opt.host;
  cfg.tls_check_name = !opt.insecure;
  workload_config wc;
  wc.keys = {"k"};
  request_spec s;
  EXPECT_TRUE(parse_request_spec("call", s, err));
  wc.mix = {s};
  workload w;
  EXPECT_TRUE(w.build(wc, err)) << err;
  run_times t;
  t.begin = now_ns();
  t.measure = t.begin;
  t.end = t.measure + 20'000'000'000ull;
  thread_stats st;
  run_thread(cfg, w, t, 0, conns, st);
  free_tls_client(cfg.tls);
  EXPECT_TRUE(st.fatal.empty()) << st.fatal;
  return st;
}

TEST(loadgen_tls_test, pipelined_calls_over_tls_are_all_checked_ok) {
  // Verifies answers decrypted from the memory BIOs are framed and checked: 4 connections
  // pipelining 8 deep, every answer a success, the certificate checked against --cacert and
  // the IP address.
  test_pair pair;
  tls_server srv(pair);
  tls_options opt{true, false, pair.pem_path, "127.0.0.1"};
  thread_stats st = run_tls(srv, opt, 4, 8, 400);
  EXPECT_GE(st.responses, 400u);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_EQ(st.outcomes.errors(), 0u);
  EXPECT_EQ(srv.handshakes(), 4);
}

TEST(loadgen_tls_test, every_feature_subset_works_over_tls) {
  // Verifies the TLS path with and without the provided buffer ring (its own recv buffer then)
  // and registered files gives only successes.
  test_pair pair;
  tls_server srv(pair);
  tls_options opt{true, false, pair.pem_path, "localhost"};
  for (unsigned f : {0u, unsigned{feat_buf_ring}, unsigned{feat_fixed_files}, unsigned{feat_all}}) {
    thread_stats st = run_tls(srv, opt, 2, 2, 100, f);
    EXPECT_GE(st.responses, 100u) << ring_feature_names(f);
    EXPECT_EQ(st.outcomes.ok(), st.responses) << ring_feature_names(f);
  }
}

TEST(loadgen_tls_test, an_untrusted_certificate_fails_the_handshake) {
  // Verifies a certificate outside the trusted store (the system's, not --cacert) ends in
  // transport errors naming the handshake, never in a success; -k accepts it.
  test_pair pair;
  tls_server srv(pair);
  tls_options strict{true, false, "", "localhost"};
  thread_stats st = run_tls(srv, strict, 2, 1, 4);
  EXPECT_EQ(st.outcomes.ok(), 0u);
  EXPECT_GE(st.outcomes.errors(), 4u);
  tls_options insecure{true, true, "", "localhost"};
  st = run_tls(srv, insecure, 2, 1, 50);
  EXPECT_EQ(st.outcomes.ok(), st.responses);
  EXPECT_GE(st.responses, 50u);
}

}  // namespace
}  // namespace tollgate::loadgen
