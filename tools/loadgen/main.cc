// tollgate-loadgen: an io_uring HTTP/1.1 load generator that checks every response.
//
// Drives any HTTP/1.1 server (tollgate, nginx, Node, ...) with a mix of MCP tools/call,
// initialize and tools/list requests, REST searches and plain GETs; prints throughput,
// latency percentiles, an outcome table and its own CPU time per request (--json for scripts).
// Run `loadgen --help` for the flags.
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine.h"
#include "stats.h"
#include "tls_client.h"
#include "workload.h"

namespace {

using namespace tollgate::loadgen;

constexpr const char* usage_text = R"(usage: loadgen [options] URL

Drives an HTTP/1.1 server at URL (http://HOST:PORT[/PATH], or https:// for TLS) over
keep-alive connections with io_uring, checks every response, and reports req/s, latency
percentiles, outcomes by kind and its own CPU time per request.

Load:
  -c, --connections N   connections in total (default 64)
  -t, --threads N       threads, each with its own ring (default 1)
      --depth N         requests outstanding per connection; > 1 pipelines (default 1)
  -d, --duration T      measured time, e.g. 10s, 500ms, 1m (default 10s)
  -n, --requests N      stop after N responses (and transport errors) in the measured
                        window, or at the end of --duration, whichever comes first
      --warmup T        unmeasured time before it (default 1s)
  -R, --rate R          open loop at R requests/s in total; latency counts from each
                        request's intended send time (default: closed loop)
      --wait-batch N    closed loop: responses one wake-up waits for (0 = auto: an eighth
                        of those outstanding, at most 16; 1 = wake for each) (default 1)
      --wait-batch-us U how long such a wait may hold responses that already arrived; it
                        adds up to U to their latency (default 200)
      --congestion CC   TCP congestion control of the client's sockets, e.g. reno (default:
                        the system's)
      --ring LIST       optional io_uring features to try, comma-separated: defer_taskrun,
                        coop_taskrun, fixed_files, buf_ring, ring_fd, all, none (default
                        all); one the kernel refuses falls back with a note on stderr

Requests (the mix; default: get of URL's path):
      --req SPEC        add to the mix; SPEC is KIND[@WEIGHT] with KIND one of
                          call        POST MCP tools/call search_stories {query[,limit]}
                          rest        GET REST search ?q=QUERY
                          init        POST MCP initialize
                          list        POST MCP tools/list
                          get:/PATH   GET PATH (only the status is checked)
      --mix FILE        one SPEC per line (# comments)
      --query Q         a search query (repeatable; default: a built-in list)
      --queries FILE    queries, one per line; each request draws one uniformly
      --query-zipf S    query popularity instead: the i-th query (in the order given) is
                        drawn with weight 1/i^S (default 0: uniform)
      --limit N         search `limit` argument (default: omitted)
      --key KEY         API key sent as Authorization: Bearer KEY (repeatable)
      --keys FILE       API keys, one per line
      --zipf S          key popularity: key i is drawn with weight 1/i^S (default 1; 0 uniform)
      --mcp-path P      MCP endpoint (default /mcp)
      --rest-path P     REST search endpoint (default /v1/stories)
      --protocol-version V  MCP-Protocol-Version header (default 2025-06-18; 'none' omits it)
  -H, --header 'N: V'   extra request header (repeatable)
      --fixed-id        JSON-RPC id 1 on every request (byte-identical requests, like wrk)
      --expect-status N status that counts as success for get (default 200)
      --seed N          random seed (default 1)

TLS (OpenSSL over memory BIOs; the ring still moves every byte):
      --tls             speak TLS whatever the URL's scheme (an https:// URL implies it)
      --cacert FILE     trust this PEM certificate (e.g. a self-signed one), not the system's
  -k, --insecure        check neither the certificate nor its name
                        Suites follow the OpenSSL configuration (OPENSSL_CONF) too.

Checks and output:
      --check full|status  full (default): status, framing, JSON-RPC id, isError, tool-error
                        code, payload shape; status: status and framing only (like wrk)
      --json            one JSON object on stdout instead of the text report
      --strict          exit 1 if any response was not a success
      --print-request   print one rendered request per mix entry and exit
  -h, --help            this text

Exit: 0 when the run completed with at least one success (and, with --strict, no errors);
1 otherwise; 2 on bad usage.
)";

[[noreturn]] void die_usage(const std::string& msg) {
  std::fprintf(stderr, "loadgen: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

bool parse_duration(std::string_view s, std::uint64_t& ns) {
  double mult = 1e9;
  if (s.ends_with("ms")) {
    mult = 1e6;
    s.remove_suffix(2);
  } else if (s.ends_with("us")) {
    mult = 1e3;
    s.remove_suffix(2);
  } else if (s.ends_with("s")) {
    s.remove_suffix(1);
  } else if (s.ends_with("m")) {
    mult = 60e9;
    s.remove_suffix(1);
  }
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || v < 0 || v > 1e6) {
    return false;
  }
  ns = static_cast<std::uint64_t>(v * mult);
  return true;
}

template <class T>
T parse_num(std::string_view flag, std::string_view s, T lo, T hi) {
  T v{};
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || v < lo || v > hi) {
    die_usage("bad value '" + std::string(s) + "' for " + std::string(flag));
  }
  return v;
}

struct options {
  std::string url;
  run_config run;
  workload_config wl;
  std::uint64_t duration_ns = 10'000'000'000ull;
  std::uint64_t warmup_ns = 1'000'000'000ull;
  std::uint64_t requests = 0;  ///< 0 = no count limit
  bool json = false;
  bool strict = false;
  bool print_request = false;
  tls_options tls;
};

/// The command line, one flag at a time.
struct arg_reader {
  std::vector<std::string> args;
  std::size_t i = 0;
  /// The value after flag args[i] (which it consumes); exits with usage when there is none.
  std::string value(const std::string& flag) {
    if (i + 1 >= args.size()) {
      die_usage(flag + " needs a value");
    }
    return args[++i];
  }
};

/// Flags that shape the load (--connections ... --congestion); false when `a` is not one.
bool parse_load_flag(const std::string& a, arg_reader& r, options& o) {
  if (a == "-c" || a == "--connections") {
    o.run.connections = parse_num<unsigned>(a, r.value(a), 1, 100000);
  } else if (a == "-t" || a == "--threads") {
    o.run.threads = parse_num<unsigned>(a, r.value(a), 1, 256);
  } else if (a == "--depth") {
    o.run.depth = parse_num<unsigned>(a, r.value(a), 1, 1024);
  } else if (a == "-d" || a == "--duration") {
    if (!parse_duration(r.value(a), o.duration_ns) || o.duration_ns == 0) {
      die_usage("bad duration for " + a);
    }
  } else if (a == "-n" || a == "--requests") {
    o.requests = parse_num<std::uint64_t>(a, r.value(a), 1, UINT64_MAX / 2);
  } else if (a == "--warmup") {
    if (!parse_duration(r.value(a), o.warmup_ns)) {
      die_usage("bad duration for " + a);
    }
  } else if (a == "-R" || a == "--rate") {
    o.run.rate = parse_num<double>(a, r.value(a), 0.001, 1e9);
  } else if (a == "--wait-batch") {
    o.run.wait_batch = parse_num<unsigned>(a, r.value(a), 0, 4096);
  } else if (a == "--wait-batch-us") {
    o.run.wait_batch_us = parse_num<unsigned>(a, r.value(a), 0, 1'000'000);
  } else if (a == "--ring") {
    if (!parse_ring_features(r.value(a), o.run.features)) {
      die_usage(
          "--ring wants a comma-separated list of defer_taskrun, coop_taskrun, "
          "fixed_files, buf_ring, ring_fd, all, none");
    }
  } else if (a == "--congestion") {
    o.run.congestion = r.value(a);
  } else {
    return false;
  }
  return true;
}

/// --req and --mix: entries of the request mix; false when `a` is neither.
bool parse_mix_flag(const std::string& a, arg_reader& r, options& o) {
  std::string err;
  if (a == "--req") {
    request_spec s;
    if (!parse_request_spec(r.value(a), s, err)) {
      die_usage(err);
    }
    o.wl.mix.push_back(s);
  } else if (a == "--mix") {
    std::vector<std::string> lines;
    if (!read_lines(r.value(a), lines, err)) {
      die_usage(err);
    }
    for (const auto& l : lines) {
      request_spec s;
      if (!parse_request_spec(l, s, err)) {
        die_usage(err);
      }
      o.wl.mix.push_back(s);
    }
  } else {
    return false;
  }
  return true;
}

/// Flags that shape the requests (--query ... --seed); false when `a` is not one.
bool parse_request_flag(const std::string& a, arg_reader& r, options& o) {
  std::string err;
  if (a == "--query") {
    o.wl.queries.push_back(r.value(a));
  } else if (a == "--queries") {
    if (!read_lines(r.value(a), o.wl.queries, err)) {
      die_usage(err);
    }
  } else if (a == "--limit") {
    o.wl.limit = parse_num<int>(a, r.value(a), 1, 1000);
  } else if (a == "--key") {
    o.wl.keys.push_back(r.value(a));
  } else if (a == "--keys") {
    if (!read_lines(r.value(a), o.wl.keys, err)) {
      die_usage(err);
    }
  } else if (a == "--query-zipf") {
    o.wl.query_zipf_s = parse_num<double>(a, r.value(a), 0.0, 10.0);
  } else if (a == "--zipf") {
    o.wl.zipf_s = parse_num<double>(a, r.value(a), 0.0, 10.0);
  } else if (a == "--mcp-path") {
    o.wl.mcp_path = r.value(a);
  } else if (a == "--rest-path") {
    o.wl.rest_path = r.value(a);
  } else if (a == "--protocol-version") {
    o.wl.protocol_version = r.value(a);
    if (o.wl.protocol_version == "none") {
      o.wl.protocol_version.clear();
    }
  } else if (a == "-H" || a == "--header") {
    o.wl.extra_headers.push_back(r.value(a));
  } else if (a == "--fixed-id") {
    o.wl.fixed_id = true;
  } else if (a == "--expect-status") {
    o.wl.expect_status = parse_num<int>(a, r.value(a), 100, 599);
  } else if (a == "--seed") {
    o.run.seed = parse_num<std::uint64_t>(a, r.value(a), 0, UINT64_MAX);
  } else {
    return parse_mix_flag(a, r, o);
  }
  return true;
}

/// Flags for checks and output (--help, --check, --json, --strict, --print-request, --url);
/// false when `a` is not one.
bool parse_output_flag(const std::string& a, arg_reader& r, options& o) {
  if (a == "-h" || a == "--help") {
    std::fputs(usage_text, stdout);
    std::exit(0);
  } else if (a == "--check") {
    std::string v = r.value(a);
    if (v == "full") {
      o.run.level = check_level::full;
    } else if (v == "status") {
      o.run.level = check_level::status;
    } else {
      die_usage("--check wants full or status");
    }
  } else if (a == "--json") {
    o.json = true;
  } else if (a == "--strict") {
    o.strict = true;
  } else if (a == "--print-request") {
    o.print_request = true;
  } else if (a == "--url") {
    o.url = r.value(a);
  } else if (a == "--tls") {
    o.tls.enabled = true;
  } else if (a == "--cacert") {
    o.tls.cafile = r.value(a);
  } else if (a == "-k" || a == "--insecure") {
    o.tls.insecure = true;
  } else {
    return false;
  }
  return true;
}

options parse_args(int argc, char** argv) {
  options o;
  arg_reader r{std::vector<std::string>(argv + 1, argv + argc)};
  for (r.i = 0; r.i < r.args.size(); r.i++) {
    const std::string a = r.args[r.i];
    if (parse_output_flag(a, r, o) || parse_load_flag(a, r, o) || parse_request_flag(a, r, o)) {
      continue;
    }
    if (!a.empty() && a[0] == '-') {
      die_usage("unknown flag " + a);
    } else if (o.url.empty()) {
      o.url = a;
    } else {
      die_usage("more than one URL");
    }
  }
  if (o.url.empty()) {
    die_usage("no URL");
  }
  if (o.run.connections < o.run.threads) {
    die_usage("fewer connections than threads");
  }
  return o;
}

/// Splits http[s]://HOST:PORT/PATH, resolves HOST, fills the address, the Host header and, for
/// TLS, the name to check.
void resolve_url(options& o, std::string& path) {
  std::string_view u = o.url;
  if (u.substr(0, 8) == "https://") {
    o.tls.enabled = true;
    u.remove_prefix(8);
  } else if (u.substr(0, 7) == "http://") {
    u.remove_prefix(7);
  } else {
    die_usage("URL must start with http:// or https://: " + o.url);
  }
  std::size_t slash = u.find('/');
  std::string_view authority = u.substr(0, slash);
  path = slash == std::string_view::npos ? "/" : std::string(u.substr(slash));
  std::string host;
  std::string port = o.tls.enabled ? "443" : "80";
  if (!authority.empty() && authority[0] == '[') {
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      die_usage("bad IPv6 literal in URL");
    }
    host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size() && authority[close + 1] == ':') {
      port = std::string(authority.substr(close + 2));
    }
  } else {
    std::size_t colon = authority.rfind(':');
    host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = std::string(authority.substr(colon + 1));
    }
  }
  if (host.empty()) {
    die_usage("no host in URL");
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int r = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (r != 0 || res == nullptr) {
    die_usage("cannot resolve " + host + ":" + port + ": " + gai_strerror(r));
  }
  std::memcpy(&o.run.addr, res->ai_addr, res->ai_addrlen);
  o.run.addr_len = res->ai_addrlen;
  freeaddrinfo(res);
  o.wl.host_header = std::string(authority);
  o.tls.host = host;
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

void sleep_until(std::uint64_t t) {
  for (;;) {
    std::uint64_t now = now_ns();
    if (now >= t) {
      return;
    }
    std::uint64_t d = t - now;
    timespec ts{static_cast<time_t>(d / 1'000'000'000ull), static_cast<long>(d % 1'000'000'000ull)};
    nanosleep(&ts, nullptr);
  }
}

std::string json_string(std::string_view s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

std::string printable(std::string_view s) {
  std::string o;
  for (unsigned char c : s) {
    o += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '.';
  }
  return o;
}

/// Writes one rendered request per mix entry to stdout (--print-request).
void print_requests(const workload& w) {
  std::string out;
  std::string tmp;
  for (std::size_t i = 0; i < w.spec_count(); i++) {
    out.clear();
    w.render(out, tmp, i, 0, 0, 1);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputs("\n", stdout);
  }
}

/// What the load threads left: each one's figures, the timeline, the CPU time of the window.
struct run_output {
  std::vector<thread_stats> stats;
  run_times times;
  double cpu = 0;
};

/// Starts the threads, measures the process' CPU time from the window's start, joins them.
run_output run_load(options& o, const workload& w) {
  unsigned threads = o.run.threads;
  if (o.requests > 0) {
    o.run.stop_after = (o.requests + threads - 1) / threads;
  }
  run_output r;
  r.stats.resize(threads);
  run_times& times = r.times;
  times.begin = now_ns() + 1'000'000;
  times.measure = times.begin + o.warmup_ns;
  times.end = times.measure + o.duration_ns;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; t++) {
    unsigned conns = o.run.connections / threads + (t < o.run.connections % threads ? 1 : 0);
    pool.emplace_back([&, t, conns] { run_thread(o.run, w, times, t, conns, r.stats[t]); });
  }
  sleep_until(times.measure);
  double cpu0 = cpu_seconds();
  for (auto& th : pool) {
    th.join();
  }
  r.cpu = cpu_seconds() - cpu0;
  return r;
}

/// Sums the threads' figures into `all`; false (after saying why) when one failed.
bool merge_stats(const std::vector<thread_stats>& stats, thread_stats& all) {
  for (auto& s : stats) {
    if (!s.fatal.empty()) {
      std::fprintf(stderr, "loadgen: %s\n", s.fatal.c_str());
      return false;
    }
    all.latency.merge(s.latency);
    all.outcomes.merge(s.outcomes);
    all.responses += s.responses;
    all.bytes_read += s.bytes_read;
    all.connects += s.connects;
    all.backlog_at_end += s.backlog_at_end;
    all.inflight_at_end += s.inflight_at_end;
    all.passes += s.passes;
    all.cqes += s.cqes;
    all.memo_hits += s.memo_hits;
    all.tcp_segs_out += s.tcp_segs_out;
    all.tcp_data_segs_out += s.tcp_data_segs_out;
  }
  return true;
}

/// The report's derived figures.
struct report {
  std::string ring;
  double cqes_per_pass = 0;
  double secs = 0;
  double cpu = 0;
  std::uint64_t ok = 0;
  std::uint64_t errors = 0;
  double rps = 0;
  double cpu_us_per_req = 0;
  double segs_per_req = 0;
  double nodata_per_req = 0;
};

report make_report(const run_output& r, const thread_stats& all) {
  report f;
  const run_times& times = r.times;
  f.ring = ring_feature_names(r.stats.front().features);
  f.cqes_per_pass =
      all.passes ? static_cast<double>(all.cqes) / static_cast<double>(all.passes) : 0;
  // The window ends at --duration, or earlier when every thread reached its --requests share.
  std::uint64_t last = times.measure;
  for (const auto& s : r.stats) {
    last = s.finished_ns > last ? s.finished_ns : last;
  }
  if (last > times.end) {
    last = times.end;
  }
  f.secs = static_cast<double>(last - times.measure) / 1e9;
  if (f.secs <= 0) {
    f.secs = 1e-9;
  }
  f.cpu = r.cpu;
  f.ok = all.outcomes.ok();
  f.errors = all.outcomes.errors();
  f.rps = static_cast<double>(all.responses) / f.secs;
  f.cpu_us_per_req = all.responses ? f.cpu * 1e6 / static_cast<double>(all.responses) : 0;
  // Segments the client sent per response, and of those the ones without data (pure ACKs,
  // SYN, FIN): a closed loop whose ACKs ride on the next request sends 1 and 0.
  f.segs_per_req = all.responses
                       ? static_cast<double>(all.tcp_segs_out) / static_cast<double>(all.responses)
                       : 0;
  f.nodata_per_req = all.responses ? static_cast<double>(all.tcp_segs_out - all.tcp_data_segs_out) /
                                         static_cast<double>(all.responses)
                                   : 0;
  return f;
}

double us(std::uint64_t ns) { return static_cast<double>(ns) / 1e3; }

/// --json: one object on stdout.
void print_json(const options& o, const thread_stats& all, const report& f) {
  const histogram& h = all.latency;
  std::printf(
      "{\"url\":%s,\"connections\":%u,\"threads\":%u,\"depth\":%u,\"rate\":%.3f,"
      "\"duration_s\":%.3f,\"warmup_s\":%.3f,\"check\":\"%s\",",
      json_string(o.url).c_str(), o.run.connections, o.run.threads, o.run.depth, o.run.rate, f.secs,
      static_cast<double>(o.warmup_ns) / 1e9, o.run.level == check_level::full ? "full" : "status");
  std::printf(
      "\"responses\":%llu,\"ok\":%llu,\"errors\":%llu,\"rps\":%.1f,\"ok_rps\":%.1f,"
      "\"bytes_read\":%llu,\"connects\":%llu,\"backlog_at_end\":%llu,"
      "\"inflight_at_end\":%llu,",
      static_cast<unsigned long long>(all.responses), static_cast<unsigned long long>(f.ok),
      static_cast<unsigned long long>(f.errors), f.rps, static_cast<double>(f.ok) / f.secs,
      static_cast<unsigned long long>(all.bytes_read),
      static_cast<unsigned long long>(all.connects),
      static_cast<unsigned long long>(all.backlog_at_end),
      static_cast<unsigned long long>(all.inflight_at_end));
  std::printf(
      "\"latency_us\":{\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"p999\":%.1f,"
      "\"max\":%.1f,\"mean\":%.1f,\"min\":%.1f},",
      us(h.quantile(0.5)), us(h.quantile(0.9)), us(h.quantile(0.99)), us(h.quantile(0.999)),
      us(h.max()), h.mean() / 1e3, us(h.min()));
  std::printf(
      "\"client_cpu_s\":%.4f,\"client_cpu_us_per_req\":%.3f,\"cqes_per_pass\":%.2f,"
      "\"tcp_segs_out\":%llu,\"tcp_data_segs_out\":%llu,\"tcp_segs_per_req\":%.4f,"
      "\"tcp_nodata_segs_per_req\":%.4f,"
      "\"ring\":\"%s\",\"memo_hits\":%llu,\"outcomes\":{\"ok\":%llu",
      f.cpu, f.cpu_us_per_req, f.cqes_per_pass, static_cast<unsigned long long>(all.tcp_segs_out),
      static_cast<unsigned long long>(all.tcp_data_segs_out), f.segs_per_req, f.nodata_per_req,
      f.ring.c_str(), static_cast<unsigned long long>(all.memo_hits),
      static_cast<unsigned long long>(f.ok));
  for (const auto& r : all.outcomes.rows()) {
    std::printf(",%s:%llu", json_string(outcome_label(r.kind, r.code, r.detail)).c_str(),
                static_cast<unsigned long long>(r.count));
  }
  std::printf("}}\n");
}

/// The text report.
void print_text(const options& o, const thread_stats& all, const report& f) {
  const unsigned threads = o.run.threads;
  const histogram& h = all.latency;
  std::printf("loadgen %s: %u connection%s, %u thread%s, %s, depth %u, %.2f s (+%.2f s warm-up)\n",
              o.url.c_str(), o.run.connections, o.run.connections == 1 ? "" : "s", threads,
              threads == 1 ? "" : "s",
              o.run.rate > 0 ? ("open loop at " +
                                std::to_string(static_cast<long long>(o.run.rate)) + " req/s")
                                   .c_str()
                             : "closed loop",
              o.run.depth, f.secs, static_cast<double>(o.warmup_ns) / 1e9);
  std::printf("  requests     %llu responses, %.1f req/s (%.1f ok/s), %.2f MB/s read\n",
              static_cast<unsigned long long>(all.responses), f.rps,
              static_cast<double>(f.ok) / f.secs,
              static_cast<double>(all.bytes_read) / f.secs / 1e6);
  std::printf(
      "  latency      p50 %.1f us  p90 %.1f us  p99 %.1f us  p99.9 %.1f us  max %.1f us"
      "  (mean %.1f us)\n",
      us(h.quantile(0.5)), us(h.quantile(0.9)), us(h.quantile(0.99)), us(h.quantile(0.999)),
      us(h.max()), h.mean() / 1e3);
  std::uint64_t total = f.ok + f.errors;
  auto pct = [&](std::uint64_t n) {
    return total ? 100.0 * static_cast<double>(n) / static_cast<double>(total) : 0.0;
  };
  std::printf("  outcomes     %-40s %12llu  %6.2f%%\n", "ok", static_cast<unsigned long long>(f.ok),
              pct(f.ok));
  for (const auto& r : all.outcomes.rows()) {
    std::printf("               %-40s %12llu  %6.2f%%\n",
                outcome_label(r.kind, r.code, r.detail).c_str(),
                static_cast<unsigned long long>(r.count), pct(r.count));
  }
  std::printf(
      "  client CPU   %.3f s (%.0f%% of one core), %.2f us/request, %.1f completions per"
      " wake-up\n",
      f.cpu, 100.0 * f.cpu / f.secs, f.cpu_us_per_req, f.cqes_per_pass);
  std::printf(
      "  TCP sent     %.3f segments per response, %.3f of them without data (ACK/SYN/FIN)\n",
      f.segs_per_req, f.nodata_per_req);
  std::printf("  io_uring     %s; %llu full checks answered by the identical-answer memo\n",
              f.ring.c_str(), static_cast<unsigned long long>(all.memo_hits));
  if (all.backlog_at_end > 0 || all.inflight_at_end > 0) {
    std::printf("  at the end   %llu in flight, %llu due but never sent (open loop backlog)\n",
                static_cast<unsigned long long>(all.inflight_at_end),
                static_cast<unsigned long long>(all.backlog_at_end));
  }
  if (f.cpu / f.secs > 0.9 * threads) {
    std::printf("  note         the client used >90%% of its %u core(s): it may be the limit\n",
                threads);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  options o = parse_args(argc, argv);
  std::string path;
  resolve_url(o, path);
  std::string tls_err;
  if (o.tls.enabled) {
    o.run.tls = make_tls_client(o.tls, tls_err);
    if (o.run.tls == nullptr) {
      die_usage(tls_err);
    }
    o.run.tls_host = o.tls.host;
    o.run.tls_check_name = !o.tls.insecure;
  }
  if (o.wl.mix.empty()) {
    request_spec s;
    s.kind = req_kind::get;
    s.path = path;
    o.wl.mix.push_back(s);
  }
  workload w;
  std::string err;
  if (!w.build(o.wl, err)) {
    die_usage(err);
  }
  if (o.print_request) {
    print_requests(w);
    return 0;
  }

  const run_output run = run_load(o, w);
  free_tls_client(o.run.tls);
  thread_stats all;
  if (!merge_stats(run.stats, all)) {
    return 1;
  }
  const thread_stats& first = run.stats.front();
  if (!first.ring_note.empty()) {
    std::fprintf(stderr, "loadgen: fallback: %s\n", first.ring_note.c_str());
  }
  const report f = make_report(run, all);
  if (o.json) {
    print_json(o, all, f);
  } else {
    print_text(o, all, f);
  }
  std::fflush(stdout);
  for (const auto& r : all.outcomes.rows()) {
    if (!r.sample.empty()) {
      std::fprintf(stderr, "loadgen: first '%s' body: %s\n",
                   outcome_label(r.kind, r.code, r.detail).c_str(), printable(r.sample).c_str());
    }
  }
  if (f.ok == 0 || (o.strict && f.errors > 0)) {
    return 1;
  }
  return 0;
}
