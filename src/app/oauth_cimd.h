// Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document; MCP authorization
// 2025-11-25 "Client ID Metadata Documents"): a client_id that is an https URL names a JSON
// document, served by the client, that registers it. tollgate fetches the document when such a
// client_id reaches /authorize or /token, checks it, and keeps it for its Cache-Control max-age.
//
// The pure pieces (the SSRF guard's address classifier, the URL rules, the document's checks,
// the cache lifetime) are free functions, tested on their own (tests/app/oauth_cimd_test.cc).
//
// cimd_fetcher does the fetch, off the cores: a core asks lookup(), which never blocks (a map
// look-up under a mutex that is never held across I/O); a document not in the cache is queued
// for one of the fetcher's own threads, and the core parks its request (engine_io::defer) until
// the `wake` it gave is called (the core's eventfd waker) and delivers it again. The worker
// resolves the host itself, refuses a non-public address unless allow-listed, and pins libcurl
// to the address it checked (CURLOPT_RESOLVE), checking it again as the socket is opened, so a
// DNS answer that changes between the check and the connect (a rebind) cannot slip past.
#pragma once

#include <sys/socket.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "oauth_store.h"
#include "tollgate/common/result.h"

namespace tollgate::app::oauth {

/// Where an address lies, for the SSRF guard. Anything but `global` is refused unless the host
/// or the address is allow-listed.
enum class address_kind {
  global,       ///< a public unicast address
  loopback,     ///< 127/8, ::1
  private_net,  ///< 10/8, 172.16/12, 192.168/16, 100.64/10 (CGNAT), fc00::/7 (ULA)
  link_local,   ///< 169.254/16, fe80::/10
  unspecified,  ///< 0/8, ::
  special,      ///< multicast, broadcast, reserved, documentation, benchmarking, NAT64, 6to4...
};
std::string_view to_string(address_kind k) noexcept;
/// Classifies an AF_INET or AF_INET6 address (an IPv4-mapped or -compatible IPv6 address is
/// classified as the IPv4 address it carries). Other families are `special`.
address_kind classify(const sockaddr* sa) noexcept;
/// The same for a numeric address as text ("10.0.0.1", "::ffff:127.0.0.1"); `special` when
/// the text is not an address.
address_kind classify(std::string_view numeric) noexcept;

/// A client_id URL taken apart.
struct cimd_target {
  bool https = true;
  std::string host;  ///< without brackets for an IPv6 literal, lower case
  uint16_t port = 443;
};
/// Whether `client_id` is meant as a metadata document URL (it has a scheme), as opposed to a
/// client_id of dynamic registration ("tgc_...").
bool is_url_client_id(std::string_view client_id) noexcept;
/// The URL rules (the draft's §3 and MCP's): https, a host, a path other than "/", no
/// fragment, no user or password, no "." or ".." path segment, at most kMaxUri bytes, no
/// spaces or control bytes. http:// only for a loopback host listed in `allow` (tests). The
/// error is a sentence for the user.
result<cimd_target, std::string> parse_client_id_url(std::string_view url,
                                                     const std::vector<std::string>& allow);
/// Whether `host` (a name or an address) is in the allow list (case-insensitive).
bool allow_listed(std::string_view host, const std::vector<std::string>& allow) noexcept;

/// Checks a fetched document against the URL it was fetched from: a JSON object; its
/// `client_id` equal to `url` byte for byte; `redirect_uris` a non-empty array (at most
/// kMaxRedirectUris) of URIs a public client may use; `client_name` (optional) a string of at
/// most kMaxClientName bytes without control characters; `token_endpoint_auth_method` absent or
/// "none" and no `client_secret` (a document cannot hold a secret: anyone can read it).
result<client, std::string> check_document(std::string_view url, std::string_view body);

/// How long a document may be kept, from its Cache-Control: max-age clamped to
/// [min_secs, max_secs]; no-store, no-cache or max-age=0 → min_secs (the request that waited
/// for it must still find it); absent → default_secs.
int64_t cache_secs(std::string_view cache_control, int64_t default_secs, int64_t min_secs,
                   int64_t max_secs) noexcept;

struct cimd_options {
  std::vector<std::string> allow;  ///< [oauth] cimd_allow
  std::string ca_file;             ///< [oauth] cimd_ca_file (empty: the system's CAs)
  int64_t timeout_ms = 5000;       ///< [oauth] cimd_timeout_ms: the whole transfer
  size_t max_bytes = 65536;        ///< a longer document is refused
  size_t max_entries = 1024;       ///< documents (and failures) kept
  int64_t default_secs = 300;      ///< kept this long without a max-age
  int64_t min_secs = 10;           ///< at least (failures too: no fetch storm on a bad URL)
  int64_t max_secs = 86400;        ///< at most, whatever max-age says
  int workers = 4;                 ///< fetch threads
  size_t max_in_flight = 64;       ///< fetches queued or running; more are refused at once
};

/// Thread-safe: lookup() from any core; the fetches run on the fetcher's own threads.
class cimd_fetcher {
 public:
  explicit cimd_fetcher(cimd_options o);
  ~cimd_fetcher();  // stops and joins the threads (a fetch in progress ends by its timeout)
  cimd_fetcher(const cimd_fetcher&) = delete;
  cimd_fetcher& operator=(const cimd_fetcher&) = delete;

  enum class state { ready, failed, pending };
  struct outcome {
    state st = state::pending;
    client c;           ///< ready: the document's client (id = the URL)
    std::string error;  ///< failed: why, a sentence for the user
  };
  /// The client of document `url`: from the cache, or a failure, or `pending` after queueing a
  /// fetch (or finding one running): `wake` is then called once, from a fetcher thread, when it
  /// ends. Never blocks. A fetch running longer than wait_bound_ms() reads as failed.
  outcome lookup(const std::string& url, int64_t now_unix, std::function<void()> wake);
  /// How long a request may wait for a document (the transfer's timeout, plus name resolution).
  int64_t wait_bound_ms() const noexcept { return o_.timeout_ms + 2000; }

  /// One fetch and its checks, blocking (the fetcher's threads; tests). `max_age` receives the
  /// response's cache lifetime.
  result<client, std::string> fetch(const std::string& url, int64_t& max_age) const;

 private:
  struct entry {
    bool in_flight = false;
    int64_t started_ms = 0;  // steady clock, while in flight
    int64_t expires = 0;     // unix seconds, once done
    bool ok = false;
    client c;
    std::string error;
    std::vector<std::function<void()>> waiters;
  };
  void run();
  void make_room_locked(int64_t now_unix);

  cimd_options o_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::unordered_map<std::string, entry> cache_;
  size_t in_flight_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tollgate::app::oauth
