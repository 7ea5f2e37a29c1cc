// The fetch of client ID metadata documents (oauth_cimd.h): the cache the cores read, and the
// threads that fetch with libcurl. A core only ever takes mu_ for a map look-up; resolution,
// the transfer and the checks run on the fetcher's threads with mu_ released.
#include <arpa/inet.h>
#include <curl/curl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

#include "oauth_cimd.h"

namespace tollgate::app::oauth {
namespace {

// Enough waiters for every core's waker several times over; a request delivered again while
// its fetch runs adds its core's waker again, and a waker called twice costs one spare pass.
constexpr size_t kMaxWaiters = 256;

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string address_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

// One transfer's state, shared with libcurl's callbacks.
struct transfer {
  std::string body;
  size_t cap = 0;
  bool over = false;
  std::string cache_control;
  const std::vector<std::string>* allow = nullptr;
  bool host_allowed = false;
  std::string refused;  // set when the socket's address failed the guard
};

size_t on_body(char* p, size_t /*size*/, size_t n, void* ud) {
  auto* t = static_cast<transfer*>(ud);
  if (t->body.size() + n > t->cap) {
    t->over = true;
    return 0;  // CURLE_WRITE_ERROR: the transfer stops here
  }
  t->body.append(p, n);
  return n;
}

size_t on_header(char* p, size_t /*size*/, size_t n, void* ud) {
  auto* t = static_cast<transfer*>(ud);
  const std::string_view line(p, n);
  constexpr std::string_view kName = "cache-control:";
  if (line.size() > kName.size() &&
      std::equal(kName.begin(), kName.end(), line.begin(),
                 [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
    std::string_view v = line.substr(kName.size());
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n')) {
      v.remove_suffix(1);
    }
    if (!t->cache_control.empty()) {
      t->cache_control += ',';
    }
    t->cache_control.append(v);
  }
  return n;
}

// The guard's second look, at the address the socket is about to connect to: whatever libcurl
// was told, it never connects to an address the guard refuses.
curl_socket_t on_open(void* ud, curlsocktype purpose, curl_sockaddr* a) {
  auto* t = static_cast<transfer*>(ud);
  if (purpose != CURLSOCKTYPE_IPCXN) {
    return CURL_SOCKET_BAD;
  }
  const address_kind k = classify(&a->addr);
  const std::string text = address_text(&a->addr);
  if (k != address_kind::global && !t->host_allowed && !allow_listed(text, *t->allow)) {
    t->refused = fmt::format("its address {} is {}", text, to_string(k));
    return CURL_SOCKET_BAD;
  }
  return ::socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

}  // namespace

cimd_fetcher::cimd_fetcher(cimd_options o) : o_(std::move(o)) {
  curl_global_init(CURL_GLOBAL_DEFAULT);  // before any thread uses libcurl
  for (int i = 0; i < o_.workers; ++i) {
    threads_.emplace_back([this] { run(); });
  }
}

cimd_fetcher::~cimd_fetcher() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    t.join();
  }
  curl_global_cleanup();
}

void cimd_fetcher::make_room_locked(int64_t now) {
  if (cache_.size() < o_.max_entries) {
    return;
  }
  std::erase_if(cache_,
                [&](const auto& e) { return !e.second.in_flight && e.second.expires <= now; });
  while (cache_.size() >= o_.max_entries) {
    auto oldest = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (!it->second.in_flight &&
          (oldest == cache_.end() || it->second.expires < oldest->second.expires)) {
        oldest = it;
      }
    }
    if (oldest == cache_.end()) {
      return;  // all in flight: bounded by max_in_flight
    }
    cache_.erase(oldest);
  }
}

cimd_fetcher::outcome cimd_fetcher::lookup(const std::string& url, int64_t now_unix,
                                           std::function<void()> wake) {
  std::lock_guard g(mu_);
  if (auto it = cache_.find(url); it != cache_.end()) {
    entry& e = it->second;
    if (e.in_flight) {
      if (steady_ms() - e.started_ms > wait_bound_ms()) {
        return {state::failed,
                {},
                "This app's metadata document could not be fetched: its host did not answer in "
                "time."};
      }
      if (e.waiters.size() < kMaxWaiters) {
        e.waiters.push_back(std::move(wake));
      }
      return {state::pending, {}, {}};
    }
    if (e.expires > now_unix) {
      return e.ok ? outcome{state::ready, e.c, {}} : outcome{state::failed, {}, e.error};
    }
  }
  if (in_flight_ >= o_.max_in_flight) {
    return {state::failed,
            {},
            "Too many app metadata documents are being fetched right now; try again shortly."};
  }
  make_room_locked(now_unix);
  entry& e = cache_[url];
  e = entry{};
  e.in_flight = true;
  e.started_ms = steady_ms();
  e.waiters.push_back(std::move(wake));
  ++in_flight_;
  queue_.push_back(url);
  cv_.notify_one();
  return {state::pending, {}, {}};
}

void cimd_fetcher::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (stop_) {
      return;
    }
    const std::string url = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    int64_t max_age = o_.min_secs;
    result<client, std::string> r = fetch(url, max_age);
    const auto now = static_cast<int64_t>(std::time(nullptr));
    std::vector<std::function<void()>> waiters;
    lk.lock();
    --in_flight_;
    if (auto it = cache_.find(url); it != cache_.end()) {
      entry& e = it->second;
      e.in_flight = false;
      e.ok = r.has_value();
      if (e.ok) {
        e.c = std::move(*r);
      } else {
        e.error = std::move(r.error());
      }
      e.expires = now + (e.ok ? max_age : o_.min_secs);
      waiters.swap(e.waiters);
    }
    lk.unlock();
    for (const auto& w : waiters) {
      if (w) {
        w();  // the core's waker: an eventfd write, never blocks
      }
    }
    lk.lock();
  }
}

result<client, std::string> cimd_fetcher::fetch(const std::string& url, int64_t& max_age) const {
  auto t = parse_client_id_url(url, o_.allow);
  if (!t) {
    return unexpected(t.error());
  }
  auto fail = [](std::string_view why) {
    return unexpected(fmt::format("This app's metadata document could not be fetched: {}.", why));
  };
  // 1. Resolve the name here and check every address it has: one non-public address is enough
  //    to refuse (an attacker controls which one a client would pick).
  transfer tr;
  tr.cap = o_.max_bytes;
  tr.allow = &o_.allow;
  tr.host_allowed = allow_listed(t->host, o_.allow);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(t->port);
  if (const int rc = ::getaddrinfo(t->host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return fail(fmt::format("its host {} could not be resolved ({})", t->host, gai_strerror(rc)));
  }
  std::string pinned;
  std::string refused;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const std::string text = address_text(ai->ai_addr);
    const address_kind k = classify(ai->ai_addr);
    if (k != address_kind::global && !tr.host_allowed && !allow_listed(text, o_.allow)) {
      refused = fmt::format(
          "its host {} has the {} address {}, which this server does not fetch "
          "from ([oauth] cimd_allow can allow it)",
          t->host, to_string(k), text);
      break;
    }
    if (pinned.empty() && !text.empty()) {
      pinned = text;
    }
  }
  ::freeaddrinfo(res);
  if (!refused.empty()) {
    return fail(refused);
  }
  if (pinned.empty()) {
    return fail(fmt::format("its host {} has no address", t->host));
  }
  // 2. Fetch from exactly that address (CURLOPT_RESOLVE), with TLS checked against the name.
  CURL* e = curl_easy_init();
  if (e == nullptr) {
    return fail("no HTTP client could be made");
  }
  in_addr v4{};
  const bool literal =
      ::inet_pton(AF_INET, t->host.c_str(), &v4) == 1 || t->host.find(':') != std::string::npos;
  curl_slist* resolve = nullptr;
  if (!literal) {
    const std::string entry = pinned.find(':') != std::string::npos
                                  ? fmt::format("{}:{}:[{}]", t->host, t->port, pinned)
                                  : fmt::format("{}:{}:{}", t->host, t->port, pinned);
    resolve = curl_slist_append(nullptr, entry.c_str());
  }
  curl_slist* headers = curl_slist_append(nullptr, "Accept: application/json");
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, t->https ? "https" : "http");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);  // a redirect would leave the checked address
  curl_easy_setopt(e, CURLOPT_NOPROXY, "*");        // and so would a proxy from the environment
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(o_.timeout_ms));
  curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(o_.max_bytes));
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &tr);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &tr);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, &tr);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "tollgate-oauth/" TOLLGATE_VERSION);
  if (resolve != nullptr) {
    curl_easy_setopt(e, CURLOPT_RESOLVE, resolve);
  }
  if (!o_.ca_file.empty()) {
    curl_easy_setopt(e, CURLOPT_CAINFO, o_.ca_file.c_str());
  }
  const CURLcode rc = curl_easy_perform(e);
  long status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(e);
  curl_slist_free_all(resolve);
  curl_slist_free_all(headers);
  if (tr.over || rc == CURLE_FILESIZE_EXCEEDED) {
    return fail(fmt::format("it is larger than {} bytes", o_.max_bytes));
  }
  if (!tr.refused.empty()) {
    return fail(tr.refused);
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    return fail(fmt::format("its host did not answer within {} ms", o_.timeout_ms));
  }
  if (rc != CURLE_OK) {
    return fail(error[0] != '\0' ? std::string(error) : std::string(curl_easy_strerror(rc)));
  }
  if (status != 200) {
    return fail(fmt::format("its host answered HTTP {}", status));
  }
  auto c = check_document(url, tr.body);
  if (c) {
    max_age = cache_secs(tr.cache_control, o_.default_secs, o_.min_secs, o_.max_secs);
  }
  return c;
}

}  // namespace tollgate::app::oauth
