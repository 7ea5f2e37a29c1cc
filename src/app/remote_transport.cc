// The transport half of `tollgate stdio --remote URL` (remote_session.h holds the session,
// remote_bridge.h what is written back, stdio_remote.cc the command). One thread, one libcurl
// multi handle:
//   1. At start, before stdin is read, the key is checked with one JSON-RPC notification
//      (`notifications/tollgate/key_check`): the server authenticates every POST to /mcp, and
//      answers a body of only notifications 202 without counting it toward the key's rate limit
//      (design §5), so the check costs the user nothing, even on a burst-1 key or one that is
//      limited right now. A 401 ends the bridge (exit 2, nothing on stdout); a server that
//      cannot be reached is logged, and the bridge starts anyway (reachability is not a
//      credential: the key is checked at the first answer).
//   2. The loop waits in curl_multi_poll on libcurl's sockets, stdin and a signalfd. Each
//      complete line read is POSTed as it is, up to kMaxInFlight at once; libcurl keeps the
//      connections alive (a dead one is replaced on the next POST: that is the reconnect), and
//      does TLS, proxies (HTTPS_PROXY, NO_PROXY) and HTTP/2 where the server offers it.
//   3. Each finished POST is translated (remote::translate) and written to stdout, one message a
//      line, in the order answers arrive (JSON-RPC ids pair them). Logs go to stderr only.
//   4. Sessions (a server with [mcp] sessions on): the id minted at initialize goes on every later
//      POST; when the server answers 404 to one (it restarted, or the session expired), the
//      bridge runs the client's initialize and notifications/initialized again itself and sends
//      the message once more, so the client never sees its session end.
//   5. Deadlines (design §5, "abandoned calls"): every POST carries `Tollgate-Deadline`, the
//      moment (unix ms, on the server's clock as the `Date` of its answers shows it) after which
//      the bridge will have given up: --timeout-ms from now, less a margin so an answer admitted
//      at the last moment still arrives in time. The server does not admit a tools/call past it.
//      When a POST times out all the same, the bridge sends `notifications/cancelled` for each
//      of its requests, so a call the server holds but has not admitted yet is dropped.
//   6. EOF on stdin, SIGTERM or SIGINT: nothing more is read; the POSTs in flight finish and are
//      written; exit 0. A 401 at any time: exit 2. Nothing is written to disk.
#include "remote_transport.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "remote_bridge.h"
#include "remote_session.h"
#include "tollgate/common/fd_io.h"
#include "tollgate/common/log.h"

namespace tollgate::app {
namespace {

constexpr size_t kMaxInFlight = 64;
// A line longer than this is answered with a parse error and skipped (a server takes 64 MiB at
// most: server.max_body_bytes).
constexpr size_t kMaxLine = 64u << 20;
constexpr size_t kMaxAnswer = 256u << 20;
constexpr int64_t kProbeTimeoutMs = 5000;
// A notification: authenticated, answered 202, never counted toward the rate limit.
constexpr std::string_view kProbeBody =
    R"({"jsonrpc":"2.0","method":"notifications/tollgate/key_check"})";

// The digits of a Retry-After header (an HTTP-date is left to the default).
int64_t parse_retry_after(std::string_view v) {
  while (!v.empty() && v.front() == ' ') {
    v.remove_prefix(1);
  }
  int64_t n = -1;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || n < 0) {
    return -1;
  }
  (void)p;
  return n;
}

struct transfer {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;  ///< this POST's own list; nullptr: the bridge's base list
  std::string body;               ///< the client's line; capacity keeps simdjson's padding
  remote::line_facts facts;
  std::string answer;
  char error[CURL_ERROR_SIZE] = {};
  bool probe = false;
  bool cancel = false;  ///< a notifications/cancelled the bridge sent itself: its answer is dropped
  bool initialize = false;
  bool sent_session = false;  ///< the POST carried the session id
  bool retried = false;       ///< sent again after a new handshake (once at most)
};

class bridge {
 public:
  bridge(remote_options o, std::string key, int signal_fd)
      : o_(std::move(o)),
        key_(std::move(key)),
        sfd_(signal_fd),
        env_(envelope::server_identity{}),
        session_(o_.timeout_ms) {}
  ~bridge();
  bridge(const bridge&) = delete;
  bridge& operator=(const bridge&) = delete;

  /// Returns the exit code.
  int run();

 private:
  transfer* acquire();
  void configure(CURL* e);
  void post(std::string_view line, bool probe, bool cancel = false);
  /// A POST of `t` timed out: tells the server its requests are abandoned (step 5).
  void cancel_requests(const transfer& t);
  /// Hands the Date of an answer to the session (its clock, for deadlines).
  void note_server_clock(CURL* e);
  /// Adds `t` (its body and facts set) to the multi handle with this moment's headers.
  void send(transfer& t);
  /// Runs the client's handshake again for a new session (blocking; rare). True when it got one.
  bool rehandshake();
  curl_slist* headers_for(const transfer& t);
  /// Reads what stdin has; false at EOF (or a read error, then `io_failed_`).
  bool read_input();
  /// Writes the answers of every finished POST; false when the bridge must stop (401, stdout).
  bool drain();
  enum class next : uint8_t { done, resent, stop };
  next finish(transfer& t, CURLcode rc);
  // finish()'s steps: what came back (`failure` holds the text a.failure points into), the
  // start-up probe's answer, an initialize's version and session, the answer translated.
  remote::http_answer answer_of(transfer& t, CURLcode rc, std::string& failure) const;
  next on_probe(const remote::http_answer& a);
  void note_initialize(transfer& t, const remote::http_answer& a);
  next forward(transfer& t, const remote::http_answer& a);
  bool flush();

  remote_options o_;
  std::string key_;
  int sfd_;
  envelope::cache env_;
  CURLM* multi_ = nullptr;
  curl_slist* base_headers_ = nullptr;
  std::vector<std::unique_ptr<transfer>> pool_;
  std::vector<transfer*> idle_;
  size_t in_flight_ = 0;
  std::string in_;           ///< bytes read, not yet a whole line
  bool discarding_ = false;  ///< skipping the rest of an over-long line
  out_buffer out_;
  remote::session session_;  ///< the handshake, what it negotiated, the server's clock
  bool down_ = false;        ///< the last POST failed (logged once until one succeeds)
  int exit_code_ = 0;
};

bridge::~bridge() {
  for (auto& t : pool_) {
    if (t->easy != nullptr) {
      if (multi_ != nullptr) {
        curl_multi_remove_handle(multi_, t->easy);
      }
      curl_easy_cleanup(t->easy);
    }
    curl_slist_free_all(t->headers);
  }
  if (multi_ != nullptr) {
    curl_multi_cleanup(multi_);
  }
  curl_slist_free_all(base_headers_);
}

size_t on_data(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<transfer*>(user);
  const size_t len = size * n;
  if (t->answer.size() + len > kMaxAnswer) {
    return 0;  // CURLE_WRITE_ERROR: reported as a malformed answer
  }
  t->answer.append(p, len);
  return len;
}

transfer* bridge::acquire() {
  if (!idle_.empty()) {
    transfer* t = idle_.back();
    idle_.pop_back();
    return t;
  }
  auto t = std::make_unique<transfer>();
  CURL* e = curl_easy_init();
  if (e == nullptr) {
    return nullptr;
  }
  t->easy = e;
  configure(e);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  pool_.push_back(std::move(t));
  return pool_.back().get();
}

void bridge::configure(CURL* e) {
  curl_easy_setopt(e, CURLOPT_URL, o_.url.c_str());
  curl_easy_setopt(e, CURLOPT_POST, 1L);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(o_.timeout_ms));
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min<int64_t>(o_.timeout_ms, 10000)));
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "tollgate-stdio/" TOLLGATE_VERSION);
  if (!o_.cacert.empty()) {
    curl_easy_setopt(e, CURLOPT_CAINFO, o_.cacert.c_str());
  }
}

curl_slist* bridge::headers_for(const transfer& t) {
  const std::vector<std::string> extra =
      session_.headers(t.facts, t.initialize, t.probe || t.cancel);
  if (extra.empty()) {
    return nullptr;
  }
  curl_slist* list = nullptr;
  for (const curl_slist* h = base_headers_; h != nullptr; h = h->next) {
    list = curl_slist_append(list, h->data);
  }
  for (const std::string& h : extra) {
    list = curl_slist_append(list, h.c_str());
  }
  return list;
}

void bridge::post(std::string_view line, bool probe, bool cancel) {
  transfer* t = acquire();
  if (t == nullptr) {
    log_error("stdio --remote: libcurl could not make a handle (out of memory)");
    std::abort();  // ENOMEM is fatal
  }
  t->body.clear();
  t->body.reserve(line.size() + 64);  // simdjson reads up to 64 bytes past the end
  t->body.assign(line);
  t->probe = probe;
  t->cancel = cancel;
  t->facts = probe || cancel ? remote::line_facts{} : remote::inspect(t->body);
  t->initialize = !cancel && !t->facts.batch && t->facts.messages.size() == 1 &&
                  t->facts.messages[0].is_request() && t->facts.messages[0].method == "initialize";
  t->retried = false;
  session_.on_line(line, t->facts, t->initialize);
  curl_easy_setopt(t->easy, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(probe || cancel ? std::min(o_.timeout_ms, kProbeTimeoutMs)
                                                     : o_.timeout_ms));
  send(*t);
}

void bridge::cancel_requests(const transfer& t) {
  for (const remote::message_facts& m : t.facts.messages) {
    if (!m.is_request()) {
      continue;
    }
    const std::string note = fmt::format(
        R"({{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{},)"
        R"("reason":"tollgate stdio --remote: no answer within {} ms"}}}})",
        m.id, o_.timeout_ms);
    post(note, false, true);
  }
}

void bridge::note_server_clock(CURL* e) {
  curl_header* h = nullptr;
  if (curl_easy_header(e, "Date", 0, CURLH_HEADER, -1, &h) != CURLHE_OK) {
    return;
  }
  const time_t server = curl_getdate(h->value, nullptr);
  if (server <= 0) {
    return;
  }
  session_.note_server_time(server);
}

void bridge::send(transfer& t) {
  curl_slist_free_all(t.headers);
  t.headers = headers_for(t);
  t.sent_session = session_.sends_id(t.initialize);
  t.answer.clear();
  t.error[0] = '\0';
  curl_easy_setopt(t.easy, CURLOPT_HTTPHEADER, t.headers != nullptr ? t.headers : base_headers_);
  curl_easy_setopt(t.easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t.body.size()));
  curl_easy_setopt(t.easy, CURLOPT_POSTFIELDS, t.body.data());
  curl_multi_add_handle(multi_, t.easy);
  ++in_flight_;
}

bool bridge::rehandshake() {
  const std::string& init_line = session_.initialize_line();
  const std::string& initialized_line = session_.initialized_line();
  if (init_line.empty()) {
    return false;
  }
  CURL* e = curl_easy_init();
  if (e == nullptr) {
    return false;
  }
  configure(e);
  std::string answer;
  curl_easy_setopt(
      e, CURLOPT_WRITEFUNCTION, +[](char* p, size_t size, size_t n, void* user) {
        static_cast<std::string*>(user)->append(p, size * n);
        return size * n;
      });
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &answer);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, base_headers_);
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(init_line.size()));
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, init_line.data());
  bool ok = false;
  long status = 0;
  if (curl_easy_perform(e) == CURLE_OK &&
      curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status == 200) {
    char* ct = nullptr;
    curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ct);
    remote::http_answer a;
    a.status = status;
    a.content_type = ct != nullptr ? std::string_view(ct) : std::string_view();
    a.body = answer;
    const std::string v = remote::negotiated_version(a);
    curl_header* h = nullptr;
    if (curl_easy_header(e, "Mcp-Session-Id", 0, CURLH_HEADER, -1, &h) == CURLHE_OK &&
        session_.renew(v, h->value)) {
      ok = true;
    }
  }
  if (ok && !initialized_line.empty()) {
    transfer probe;  // only for its headers: the new version and session
    curl_slist* list = headers_for(probe);
    answer.clear();
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, list != nullptr ? list : base_headers_);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(initialized_line.size()));
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, initialized_line.data());
    (void)curl_easy_perform(e);  // a notification: its answer (202) changes nothing
    curl_slist_free_all(list);
  }
  curl_easy_cleanup(e);
  if (ok) {
    log_info("stdio --remote: {} had ended the session; opened a new one", o_.url);
  }
  return ok;
}

bool bridge::flush() {
  if (out_.empty()) {
    return true;
  }
  if (write_all(STDOUT_FILENO, out_.view()) != out_.size()) {
    log_error("stdio --remote: writing to stdout failed: {}", std::strerror(errno));
    exit_code_ = 1;
    return false;
  }
  out_.clear();
  return true;
}

remote::http_answer bridge::answer_of(transfer& t, CURLcode rc, std::string& failure) const {
  remote::http_answer a;
  if (rc != CURLE_OK) {
    a.transport_failed = true;
    const char* detail = t.error[0] != '\0' ? t.error : curl_easy_strerror(rc);
    a.not_sent = rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY ||
                 rc == CURLE_COULDNT_CONNECT;
    a.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      failure = fmt::format("no answer within {} ms: {}", o_.timeout_ms, detail);
    } else if (rc == CURLE_PEER_FAILED_VERIFICATION) {
      failure = fmt::format(
          "TLS: the server's certificate could not be verified ({}); give its "
          "CA with --cacert FILE",
          detail);
    } else if (rc == CURLE_SSL_CONNECT_ERROR) {
      failure = fmt::format("TLS handshake failed ({}); does the server speak HTTPS?", detail);
    } else if (rc == CURLE_WRITE_ERROR) {
      failure = "the answer is larger than 256 MiB";
    } else {
      failure = detail;
    }
    a.failure = failure;
  } else {
    long status = 0;
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
    a.status = status;
    char* ct = nullptr;
    curl_easy_getinfo(t.easy, CURLINFO_CONTENT_TYPE, &ct);
    a.content_type = ct != nullptr ? std::string_view(ct) : std::string_view();
    a.body = t.answer;
    curl_header* h = nullptr;
    if ((status == 429 || status >= 500) &&
        curl_easy_header(t.easy, "Retry-After", 0, CURLH_HEADER, -1, &h) == CURLHE_OK) {
      a.retry_after_secs = parse_retry_after(h->value);
    }
  }
  return a;
}

bridge::next bridge::on_probe(const remote::http_answer& a) {
  if (a.transport_failed) {
    log_error(
        "stdio --remote: {} cannot be reached ({}); starting anyway: messages are "
        "answered with errors until it answers, and the key is checked then",
        o_.url, a.failure);
    down_ = true;
  } else if (a.status == 401) {
    log_error(
        "stdio --remote: {} refused the key in TOLLGATE_API_KEY (HTTP 401: the key is "
        "unknown or revoked)",
        o_.url);
    exit_code_ = 2;
    return next::stop;
  } else {
    if (a.status >= 500) {
      log_error("stdio --remote: {} answered HTTP {} at start; starting anyway", o_.url, a.status);
      down_ = true;
    } else if ((a.status >= 300 && a.status < 400) || a.status == 404 || a.status == 405) {
      log_error(
          "stdio --remote: {} answered HTTP {} to a ping; is it the server's MCP "
          "endpoint (https://HOST/mcp)?",
          o_.url, a.status);
    } else {
      log_info("stdio --remote: forwarding to {}", o_.url);
    }
  }
  return next::done;
}

void bridge::note_initialize(transfer& t, const remote::http_answer& a) {
  if (!t.initialize || a.transport_failed || a.status != 200) {
    return;
  }
  session_.adopt_version(remote::negotiated_version(a));
  curl_header* h = nullptr;
  if (curl_easy_header(t.easy, "Mcp-Session-Id", 0, CURLH_HEADER, -1, &h) == CURLHE_OK) {
    session_.adopt_id(h->value);
  }
}

bridge::next bridge::forward(transfer& t, const remote::http_answer& a) {
  std::string reason;
  const remote::bridge_view view{env_, o_.url, session_.negotiated()};
  switch (remote::translate(t.facts, a, view, out_, reason)) {
    case remote::verdict::unauthorized:
      log_error(
          "stdio --remote: {} refused the key in TOLLGATE_API_KEY (HTTP 401: the key is "
          "unknown or was revoked); exiting",
          o_.url);
      out_.clear();
      exit_code_ = 2;
      return next::stop;
    case remote::verdict::refused:
      // Each one: the user has something to fix (the URL, the message's size).
      log_error("stdio --remote: {} refused a message ({}); retrying it will not help", o_.url,
                reason);
      down_ = false;
      break;
    case remote::verdict::failed:
      if (!down_) {
        log_error(
            "stdio --remote: {} could not answer ({}); answering with errors until it "
            "does",
            o_.url, reason);
      }
      down_ = true;
      break;
    case remote::verdict::answered:
      if (down_) {
        log_info("stdio --remote: {} answers again", o_.url);
      }
      down_ = false;
      break;
  }
  return flush() ? next::done : next::stop;
}

bridge::next bridge::finish(transfer& t, CURLcode rc) {
  std::string failure;
  const remote::http_answer a = answer_of(t, rc, failure);
  if (!a.transport_failed) {
    note_server_clock(t.easy);
  }
  if (t.probe) {
    return on_probe(a);
  }
  if (t.cancel) {
    return next::done;  // a notification: its 202 (or a failure) changes nothing
  }
  if (a.timed_out) {
    cancel_requests(t);
  }
  if (!a.transport_failed && a.status == 404 && t.sent_session && !t.retried && rehandshake()) {
    t.retried = true;
    send(t);
    return next::resent;
  }
  note_initialize(t, a);
  return forward(t, a);
}

bool bridge::drain() {
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
    if (m->msg != CURLMSG_DONE) {
      continue;
    }
    transfer* t = nullptr;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &t);
    const CURLcode rc = m->data.result;
    curl_multi_remove_handle(multi_, t->easy);
    --in_flight_;
    const next n = finish(*t, rc);
    if (n == next::resent) {
      continue;
    }
    curl_slist_free_all(t->headers);
    t->headers = nullptr;
    idle_.push_back(t);
    if (n == next::stop) {
      return false;
    }
  }
  return true;
}

bool bridge::read_input() {
  char buf[64 * 1024];
  const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) {
      return true;
    }
    log_error("stdio --remote: reading stdin failed: {}", std::strerror(errno));
    exit_code_ = 1;
    return false;
  }
  const bool eof = n == 0;
  std::string_view chunk(buf, static_cast<size_t>(n));
  if (eof && !in_.empty()) {
    chunk = "\n";  // a last line without its newline still counts
  }
  while (!chunk.empty()) {
    const size_t nl = chunk.find('\n');
    if (nl == std::string_view::npos) {
      if (!discarding_) {
        in_.append(chunk);
      }
      break;
    }
    if (!discarding_) {
      in_.append(chunk.substr(0, nl));
      std::string_view line(in_);
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
        line.remove_suffix(1);
      }
      while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) {
        line.remove_prefix(1);
      }
      if (!line.empty()) {
        post(line, false);
      }
    }
    discarding_ = false;
    in_.clear();
    chunk.remove_prefix(nl + 1);
  }
  if (in_.size() > kMaxLine) {
    log_error("stdio --remote: a line of more than {} bytes was skipped", kMaxLine);
    env_.error_response(out_, envelope::null_id,
                        envelope::rpc_error{envelope::rpc_error_kind::parse_error, {}, {}, 0});
    out_.push_back('\n');
    in_.clear();
    discarding_ = true;
    if (!flush()) {
      return false;
    }
  }
  return !eof;
}

int bridge::run() {
  multi_ = curl_multi_init();
  if (multi_ == nullptr) {
    log_error("stdio --remote: libcurl could not start");
    return 1;
  }
  curl_multi_setopt(multi_, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_MULTIPLEX));
  base_headers_ = curl_slist_append(base_headers_, ("Authorization: Bearer " + key_).c_str());
  base_headers_ = curl_slist_append(base_headers_, "Content-Type: application/json");
  base_headers_ = curl_slist_append(base_headers_, "Accept: application/json, text/event-stream");
  base_headers_ = curl_slist_append(base_headers_, "Expect:");  // no 100-continue round trip

  // 1. The key check, before stdin is read.
  post(kProbeBody, true);
  while (in_flight_ > 0) {
    int running = 0;
    curl_multi_perform(multi_, &running);
    if (!drain()) {
      return exit_code_;
    }
    if (in_flight_ > 0) {
      curl_multi_poll(multi_, nullptr, 0, 100, nullptr);
    }
  }

  // 2-4. Forward until stdin ends (or a signal), then finish what is in flight.
  bool reading = true;
  while (reading || in_flight_ > 0) {
    curl_waitfd fds[2];
    unsigned nfds = 0;
    const bool want_input = reading && in_flight_ < kMaxInFlight;
    if (want_input) {
      fds[nfds++] = curl_waitfd{STDIN_FILENO, CURL_WAIT_POLLIN, 0};
    }
    const unsigned sig_at = nfds;
    if (reading && sfd_ >= 0) {
      fds[nfds++] = curl_waitfd{sfd_, CURL_WAIT_POLLIN, 0};
    }
    if (curl_multi_poll(multi_, fds, nfds, 1000, nullptr) != CURLM_OK) {
      log_error("stdio --remote: waiting failed");
      return 1;
    }
    if (reading && sfd_ >= 0 && fds[sig_at].revents != 0) {
      signalfd_siginfo si{};
      if (::read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        log_info("{}: reading no more; answering what is in flight ({} POSTs), then exiting",
                 si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", in_flight_);
        reading = false;
      }
    }
    if (want_input && reading && fds[0].revents != 0) {
      if (!read_input()) {
        reading = false;
        if (exit_code_ != 0) {
          return exit_code_;
        }
      }
    }
    int running = 0;
    curl_multi_perform(multi_, &running);
    if (!drain()) {
      return exit_code_;
    }
  }
  return exit_code_;
}

}  // namespace

int run_bridge(remote_options o, std::string key, int signal_fd) {
  bridge b(std::move(o), std::move(key), signal_fd);
  return b.run();
}

}  // namespace tollgate::app
