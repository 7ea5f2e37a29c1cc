// A self-signed ECDSA P-256 certificate and key, made in-process into a temp dir (tests never
// commit keys), valid from now + start_secs for `days`. Removed with the object.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace tollgate::net::testing {

struct tls_pair {
  std::string dir;
  std::string cert;
  std::string key;
  explicit tls_pair(const char* name, long days = 2, long start_secs = -3600) {
    char tmpl[] = "/tmp/tollgate-tls-pair-XXXXXX";
    dir = ::mkdtemp(tmpl);
    cert = dir + "/" + name + "-cert.pem";
    key = dir + "/" + name + "-key.pem";
    EVP_PKEY* pk = EVP_EC_gen("P-256");
    X509* x = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), start_secs);
    X509_gmtime_adj(X509_getm_notAfter(x), start_secs + days * 86400);
    X509_set_pubkey(x, pk);
    X509_NAME* n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
    X509_set_issuer_name(x, n);
    X509_sign(x, pk, EVP_sha256());
    FILE* f = std::fopen(cert.c_str(), "w");
    PEM_write_X509(f, x);
    std::fclose(f);
    f = std::fopen(key.c_str(), "w");
    PEM_write_PrivateKey(f, pk, nullptr, nullptr, 0, nullptr, nullptr);
    std::fclose(f);
    X509_free(x);
    EVP_PKEY_free(pk);
  }
  ~tls_pair() { std::filesystem::remove_all(dir); }
  tls_pair(const tls_pair&) = delete;
  tls_pair& operator=(const tls_pair&) = delete;
};

}  // namespace tollgate::net::testing
