// Handing an established TLS 1.3 session's transmit side to the kernel (the `tls` ULP,
// <linux/tls.h>). The session keeps its records in user space until then (net/tls_session.h);
// what the kernel needs is the server's write key and IV, derived from the server application
// traffic secret (RFC 8446 section 7.3), and the sequence number of the next record.
//
// Only the transmit side moves: received records still go through OpenSSL, which keeps its read
// keys (and a client's KeyUpdate of them) in user space. TLS 1.2 sessions stay in user space
// (see docs/design.md, "kTLS").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tollgate::net::detail {

/// One session's transmit parameters in the kernel's terms. Wiped when destroyed.
struct ktls_keys {
  uint16_t cipher_type = 0;  ///< TLS_CIPHER_AES_GCM_128, _AES_GCM_256 or _CHACHA20_POLY1305
  uint8_t key_len = 0;       ///< 16 or 32
  uint8_t key[32] = {};
  uint8_t iv[12] = {};  ///< the 12-byte write IV (the kernel takes GCM's as salt + iv)
  uint64_t seq = 0;     ///< the sequence number of the next record the kernel writes

  ktls_keys() = default;
  ktls_keys(const ktls_keys&) = delete;
  ktls_keys& operator=(const ktls_keys&) = delete;
  ~ktls_keys();
};

/// The largest tls12_crypto_info_* the kernel takes for the suites above.
inline constexpr size_t ktls_info_max = 64;

/// Key and IV from a TLS 1.3 traffic secret (HKDF-Expand-Label "key" and "iv" under the suite's
/// hash) for suite `suite` (the IANA id: 0x1301, 0x1302 or 0x1303). False: a suite the kernel
/// does not take here, a secret of the wrong length, or OpenSSL failed.
bool ktls_derive(uint16_t suite, const uint8_t* secret, size_t secret_len, ktls_keys& out);

/// The kernel's tls12_crypto_info_* for `k` (version TLS 1.3) into `out` (ktls_info_max bytes);
/// returns its size.
size_t ktls_crypto_info(const ktls_keys& k, unsigned char* out) noexcept;

/// Attaches the tls ULP to connected socket `fd` and installs `k` as its transmit state.
/// 0, or the errno of the call that refused (then the socket still sends bytes as they are, so
/// the session can go on in user space). Two setsockopt calls: nothing waits.
int ktls_attach_tx(int fd, const ktls_keys& k) noexcept;

/// Sends a close_notify alert as a control record through the kernel's record layer, without
/// waiting (MSG_DONTWAIT). False: not sent (a full socket buffer, a gone peer).
bool ktls_send_close_notify(int fd) noexcept;

/// Whether this kernel has the tls ULP, probed on a fresh socket: empty when it has, else why
/// not ("No such file or directory" when the module is absent).
std::string ktls_probe();

}  // namespace tollgate::net::detail
