// `tollgate stdio --remote URL`, the command: its arguments, the key from TOLLGATE_API_KEY, the
// signals and libcurl's start; remote_transport.cc runs the bridge (its lifecycle in steps),
// remote_session.h its MCP session with the server, remote_bridge.h what is written back.
#include "stdio_remote.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "remote_session.h"
#include "remote_transport.h"
#include "tollgate/common/log.h"

namespace tollgate::app {
namespace {

std::string_view usage_remote() {
  return R"(Usage: TOLLGATE_API_KEY=KEY tollgate stdio --remote URL [--cacert FILE] [--timeout-ms N]

Bridges a desktop MCP client that launches stdio servers to a tollgate server: each
newline-delimited JSON-RPC message read on stdin is POSTed to URL (the server's /mcp endpoint)
with the key, and the answers are written to stdout, one message a line; logs go to stderr.
The server enforces the key's rate limit and quota, so any number of bridges may run at once.

  --remote URL       http:// or https:// address of the server's MCP endpoint
  --cacert FILE      PEM certificates to verify the server with (default: the system's store)
  --timeout-ms N     longest wait for one answer, connecting included (default 30000)
  --help             this text

A key the server refuses (401) ends the bridge with exit 2. A server that cannot be reached,
a 5xx or a malformed answer is reported per message (tools/call: tool error `unavailable`;
other requests: JSON-RPC error -32603) and the next message tries again. A 429 on tools/call
becomes the tool error `rate_limited`. HTTPS_PROXY and NO_PROXY are honoured. EOF on stdin,
SIGTERM or SIGINT: the messages in flight are answered, then exit 0.
)";
}

}  // namespace

bool wants_remote(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--remote") {
      return true;
    }
  }
  return false;
}

result<remote_options, cli_error> parse_remote_args(int argc, char** argv) {
  remote_options o;
  for (int i = 0; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      return unexpected(cli_error{"", true});
    }
    std::string v;
    if (a == "--remote") {
      if (auto r = flag_value(argc, argv, i, "a URL (http://HOST:PORT/mcp or https://...)", o.url);
          !r) {
        return unexpected(r.error());
      }
    } else if (a == "--cacert") {
      if (auto r = flag_value(argc, argv, i, "a FILE of PEM certificates", o.cacert); !r) {
        return unexpected(r.error());
      }
    } else if (a == "--timeout-ms") {
      if (auto r = flag_value(argc, argv, i, "a number of milliseconds", v); !r) {
        return unexpected(r.error());
      }
      int64_t n = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || p != v.data() + v.size() || n < 1 || n > 3600000) {
        return unexpected(cli_error{
            fmt::format("--timeout-ms: '{}' is not a whole number between 1 and 3600000", v)});
      }
      o.timeout_ms = n;
    } else if (a == "--config" || a == "--data-dir" || a == "--corpus" || a == "--sample") {
      return unexpected(cli_error{fmt::format(
          "{}: not with --remote (the server at the URL has its own corpus, keys and quota)", a)});
    } else {
      return unexpected(cli_error{
          fmt::format("unknown option '{}' (see tollgate stdio --remote URL --help)", a)});
    }
  }
  // The URL: libcurl's own parser, and only the two schemes the bridge speaks.
  CURLU* u = curl_url();
  const CURLUcode uc = curl_url_set(u, CURLUPART_URL, o.url.c_str(), 0);
  char* scheme = nullptr;
  const bool scheme_ok =
      uc == CURLUE_OK && curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      (std::string_view(scheme) == "http" || std::string_view(scheme) == "https");
  curl_free(scheme);
  curl_url_cleanup(u);
  if (!scheme_ok) {
    return unexpected(
        cli_error{fmt::format("--remote: '{}' is not an http:// or https:// URL (for example "
                              "https://api.example.com/mcp)",
                              o.url)});
  }
  if (!o.cacert.empty() && ::access(o.cacert.c_str(), R_OK) != 0) {
    return unexpected(
        cli_error{fmt::format("--cacert: cannot read '{}': {}", o.cacert, std::strerror(errno))});
  }
  return o;
}

int run_stdio_remote(int argc, char** argv) {
  auto o = parse_remote_args(argc, argv);
  if (!o) {
    if (o.error().help) {
      fmt::print("{}", usage_remote());
      return 0;
    }
    fmt::print(stderr, "tollgate stdio: {}\n", o.error().message);
    return 2;
  }
  const char* key = std::getenv("TOLLGATE_API_KEY");
  if (key == nullptr || *key == '\0') {
    fmt::print(stderr,
               "tollgate stdio: set TOLLGATE_API_KEY to an API key of the server at {} (its "
               "operator makes one with `tollgate keys create`)\n",
               o->url);
    return 2;
  }
  if (!remote::header_safe(key)) {
    fmt::print(stderr,
               "tollgate stdio: TOLLGATE_API_KEY holds a space or a character outside printable "
               "ASCII, which no key has\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  // SIGTERM and SIGINT end the bridge once the messages in flight are answered. Blocked before
  // libcurl starts any thread (its resolver), so only the signalfd takes them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  const int sfd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    log_error("stdio --remote: signalfd: {}", std::strerror(errno));
    return 1;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    log_error("stdio --remote: libcurl could not start");
    ::close(sfd);
    return 1;
  }
  const int rc = run_bridge(std::move(*o), key, sfd);  // the bridge is gone before the cleanup
  curl_global_cleanup();
  ::close(sfd);
  return rc;
}

}  // namespace tollgate::app
