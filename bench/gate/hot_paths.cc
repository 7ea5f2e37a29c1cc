// The CI perf gate's driver (perf/gate/run): runs each hot path a fixed number of times and,
// under `valgrind --tool=callgrind --collect-atstart=no --instr-atstart=no`, instruments each op
// from its warm-up on, collects events only around its measured loop and dumps one profile part
// per op (described as the op's name).
// Outside valgrind the client requests are no-ops, so the binary also runs natively.
//
// Before measuring, each op's output is verified once against an independent expectation
// (a reference rendering, a known count); a wrong answer exits 1. Each op is warmed up, then
// its measured loop counts heap allocations on this thread: any allocation exits 1.
//
// Output, one line per op on stdout:  op NAME iters=N allocs=A
// Usage: gate_hot_paths [--list] [--scale K] [--only NAME]...  (--scale: K times the iterations)
#include <valgrind/callgrind.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/alloc_counter.h"
#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"
#include "tollgate/envelope/envelope.h"
#include "tollgate/envelope/reference.h"
#include "tollgate/http/parser.h"
#include "tollgate/mcp/endpoint.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/service.h"
#include "tollgate/search/backend.h"

namespace {

using namespace tollgate;

// ---- harness ----

std::vector<std::string> g_only;  // empty: every op
uint64_t g_scale = 1;             // --scale: iteration counts times this
bool g_list = false;
int g_failures = 0;

bool selected(std::string_view name) {
  if (g_list) {
    std::printf("%.*s\n", static_cast<int>(name.size()), name.data());
    return false;
  }
  if (g_only.empty()) {
    return true;
  }
  for (const auto& o : g_only) {
    if (o == name) {
      return true;
    }
  }
  return false;
}

[[noreturn]] void die(std::string_view op, std::string_view why) {
  std::fprintf(stderr, "gate_hot_paths: %.*s: %.*s\n", static_cast<int>(op.size()), op.data(),
               static_cast<int>(why.size()), why.data());
  std::exit(1);
}

// Keeps a value alive as far as the optimiser can tell (same idea as benchmark::DoNotOptimize).
template <class T>
inline void keep(const T& v) {
  asm volatile("" : : "r,m"(v) : "memory");
}

/// Runs `once` warm-up times uncollected, then `iters` times with callgrind collecting, and dumps
/// that part as NAME. Fails when the measured loop allocated.
/// Warm-up calls before an op's measured loop.
constexpr uint64_t warm_up_of(uint64_t iters) { return iters / 4 + 16; }

template <class F>
void measure(std::string_view name, uint64_t iters, F&& once) {
  iters *= g_scale;
  const uint64_t warm = warm_up_of(iters);
  // Set-up ran uninstrumented (fast); the op's warm-up and loop run instrumented.
  CALLGRIND_START_INSTRUMENTATION;
  for (uint64_t i = 0; i < warm; ++i) {
    once();
  }
  const std::string label(name);
  CALLGRIND_ZERO_STATS;
  test::alloc_scope allocs;
  CALLGRIND_TOGGLE_COLLECT;
  for (uint64_t i = 0; i < iters; ++i) {
    once();
  }
  CALLGRIND_TOGGLE_COLLECT;
  const uint64_t n = allocs.count();
  CALLGRIND_DUMP_STATS_AT(label.c_str());
  CALLGRIND_STOP_INSTRUMENTATION;
  std::printf("op %s iters=%llu allocs=%llu\n", label.c_str(),
              static_cast<unsigned long long>(iters), static_cast<unsigned long long>(n));
  std::fflush(stdout);
  if (n != 0) {
    std::fprintf(stderr, "gate_hot_paths: %s: %llu allocations in %llu steady-state ops\n",
                 label.c_str(), static_cast<unsigned long long>(n),
                 static_cast<unsigned long long>(iters));
    ++g_failures;
  }
}

// ---- HTTP parse of a realistic MCP POST ----

const std::string kCallBody =
    R"({"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_stories",)"
    R"("arguments":{"query":"io_uring zero copy networking","limit":10,"offset":0,)"
    R"("sort":"relevance","tags":["linux","performance"],"since":"2025-01-01T00:00:00Z"},)"
    R"("_meta":{"progressToken":"tok-7f3a"}}})";

void op_http_parse() {
  if (!selected("http_parse_mcp_post")) {
    return;
  }
  const std::string wire =
      "POST /mcp HTTP/1.1\r\n"
      "Host: api.tollgate.example:8080\r\n"
      "User-Agent: claude-code/1.0.44 (external, cli)\r\n"
      "Accept: application/json, text/event-stream\r\n"
      "Accept-Encoding: gzip, deflate, br\r\n"
      "Content-Type: application/json\r\n"
      "Authorization: Bearer tg_live_4f9c2a7e1b3d5f6a8c0e2b4d6f8a0c1e\r\n"
      "MCP-Protocol-Version: 2025-06-18\r\n"
      "Mcp-Session-Id: 1868a90c-8e5a-4a4b-9b8f-3d2c1e0f9a7b\r\n"
      "Connection: keep-alive\r\n"
      "Content-Length: " +
      std::to_string(kCallBody.size()) + "\r\n\r\n" + kCallBody;
  std::string buf = wire;
  http::request req;
  const http::limits lim;
  const http::parse_result r = http::parse_request(buf.data(), buf.size(), lim, req);
  if (r.status != http::parse_status::complete || r.consumed != wire.size() ||
      req.method != "POST" || req.path != "/mcp" || req.num_headers != 10 ||
      req.body != kCallBody || !req.keep_alive ||
      req.header_value("mcp-protocol-version") != "2025-06-18" ||
      req.header_value("authorization") != "Bearer tg_live_4f9c2a7e1b3d5f6a8c0e2b4d6f8a0c1e") {
    die("http_parse_mcp_post", "the request did not parse as expected");
  }
  measure("http_parse_mcp_post", 5000, [&] {
    keep(http::parse_request(buf.data(), buf.size(), lim, req));
    keep(req);
  });
}

// ---- JSON-RPC decode + dispatch + envelope of tools/call with a trivial tool ----

class echo_tool : public mcp::tool {
 public:
  mcp::tool_result call(const mcp::arguments& a, json_out& out, mcp::call_context&) override {
    out.raw("{\"total\":0,\"query\":");
    out.string(a[0].str);
    out.raw("}");
    return mcp::tool_result::success();
  }
};

constexpr std::string_view kHostHeaders =
    "X-RateLimit-Limit: 10\r\nX-RateLimit-Remaining: 9\r\nX-RateLimit-Reset: 1\r\n";

// The host (admit, settle) and, lent to the endpoint, the request's figures (header lines).
class fixed_host : public mcp::host, public mcp::rate_charge {
 public:
  void write_headers(out_buffer& out) override { out.append(kHostHeaders); }
  mcp::admission admit(std::string_view, std::string_view) override {
    ++admitted_;
    return {};
  }
  void settle(bool success) override { settled_ok_ += success ? 1 : 0; }
  mcp::admission rate_check() override { return {}; }
  mcp::admission charge_extra() override { return {}; }
  void refund() override {}
  uint64_t admitted_ = 0;
  uint64_t settled_ok_ = 0;
};

void op_mcp_call() {
  if (!selected("mcp_tools_call")) {
    return;
  }
  envelope::cache env{envelope::server_identity{}};
  mcp::registry tools;
  mcp::tool_def t;
  t.name = "search_stories";
  t.title = "Search stories";
  t.description = "Search the story index.";
  // clang-format off
  t.args = {
      {"query", mcp::arg_type::string, "What to search for.", true, 1, 500, true, true, {}, false, 0, {}},
      {"limit", mcp::arg_type::integer, "Results.", false, 1, 50, true, true, {}, true, 10, {}},
      {"offset", mcp::arg_type::integer, "Skip.", false, 0, 1000, true, true, {}, true, 0, {}},
      {"sort", mcp::arg_type::enumeration, "Order.", false, 0, 0, false, false, {"relevance", "date"}, true, 0, "relevance"},
      {"tags", mcp::arg_type::string_array, "Tags.", false, 0, 16, false, true, {}, false, 0, {}},
      {"since", mcp::arg_type::string, "From.", false, 0, 40, false, true, {}, false, 0, {}},
  };
  // clang-format on
  t.impl = std::make_shared<echo_tool>();
  tools.add(std::move(t));
  tools.finish();
  mcp::endpoint ep(tools, env);
  fixed_host host;
  ep.lend(nullptr, &host);

  std::string padded = kCallBody + std::string(mcp::body_padding, ' ');
  http::request req;
  req.method = "POST";
  req.path = "/mcp";
  req.target = "/mcp";
  req.add_header("Host", "127.0.0.1:8080");
  req.add_header("Accept", "application/json, text/event-stream");
  req.add_header("Content-Type", "application/json");
  req.add_header("Authorization", "Bearer tg_0123456789abcdef");
  req.add_header("MCP-Protocol-Version", "2025-06-18");
  req.body = std::string_view(padded.data(), kCallBody.size());
  out_buffer out(64 * 1024);

  const http::response_info info = ep.handle_http(req, host, out);
  const std::string want_body =
      envelope::reference::success("42", envelope::revision::v2025_06_18,
                                   R"({"total":0,"query":"io_uring zero copy networking"})");
  const std::string_view got = out.view();
  if (info.status != 200 || info.close || got.rfind("HTTP/1.1 200 ", 0) != 0 ||
      got.find(kHostHeaders) == std::string_view::npos || got.size() < want_body.size() ||
      got.substr(got.size() - want_body.size()) != want_body || host.admitted_ != 1 ||
      host.settled_ok_ != 1) {
    std::fprintf(stderr, "got:\n%.*s\nwant body:\n%s\n", static_cast<int>(got.size()), got.data(),
                 want_body.c_str());
    die("mcp_tools_call", "the response differs from the reference envelope");
  }
  measure("mcp_tools_call", 2000, [&] {
    out.clear();
    keep(ep.handle_http(req, host, out));
  });
}

// ---- envelope render: success with a 2 KB payload, each tool error ----

const envelope::cache& env_cache() {
  static const envelope::cache c{envelope::server_identity{}};
  return c;
}

// ~2 KB of search payload with a quote and a newline in every title (escaped on the way in).
std::string payload_2k() {
  std::string s = R"({"total":12,"stories":[)";
  for (int i = 0; s.size() < 2000; ++i) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on `"," + std::string(...)`.
    s.append(i != 0 ? "," : "");
    s.append(R"({"id":"s)");
    s.append(std::to_string(i));
    s.append(
        R"(","title":"A \"quoted\" title\nabout io_uring","url":"https://example.com/x","score":42})");
  }
  return s + "]}";
}

void op_envelope_success() {
  if (!selected("envelope_success_2k")) {
    return;
  }
  const std::string payload = payload_2k();
  out_buffer out(16 * 1024);
  auto once = [&] {
    out.clear();
    env_cache().head(out, 200, false);
    out.append(kHostHeaders);
    envelope::body_mark m = env_cache().body_start(out);
    env_cache().success_prefix(out, "42", envelope::revision::v2025_06_18);
    json_out j(out, true);
    j.raw(payload);
    env_cache().success_suffix(out);
    env_cache().body_end(out, m);
  };
  once();
  if (out.view() !=
      envelope::reference::http(
          200, false, kHostHeaders,
          envelope::reference::success("42", envelope::revision::v2025_06_18, payload))) {
    die("envelope_success_2k", "differs from the reference rendering");
  }
  measure("envelope_success_2k", 2000, [&] {
    once();
    keep(out.data());
  });
}

void op_envelope_tool_errors() {
  for (size_t c = 0; c < envelope::num_tool_error_codes; ++c) {
    const auto code = static_cast<envelope::tool_error_code>(c);
    if (code != envelope::tool_error_code::unavailable &&
        envelope::name_of(code) == envelope::name_of(envelope::tool_error_code::unavailable)) {
      continue;  // `unavailable` again with its own message: the same path, under the same name
    }
    const std::string name = "envelope_tool_error_" + std::string(envelope::name_of(code));
    if (!selected(name)) {
      continue;
    }
    envelope::tool_error e{code, -1, -1, -1, -1, {}};
    if (code == envelope::tool_error_code::quota_exceeded) {
      e = {code, 394200, 1000, 1000, 0, {}};
    } else if (code == envelope::tool_error_code::rate_limited) {
      e.retry_after_secs = 1;
    }
    out_buffer out(4096);
    auto once = [&] {
      out.clear();
      env_cache().head(out, 200, false);
      out.append(kHostHeaders);
      envelope::body_mark m = env_cache().body_start(out);
      env_cache().tool_error_response(out, "42", envelope::revision::v2025_06_18, e);
      env_cache().body_end(out, m);
    };
    once();
    if (out.view() != envelope::reference::http(200, false, kHostHeaders,
                                                envelope::reference::tool_error_response(
                                                    "42", envelope::revision::v2025_06_18, e))) {
      die(name, "differs from the reference rendering");
    }
    measure(name, 2000, [&] {
      once();
      keep(out.data());
    });
  }
}

// ---- quota: authenticate + check_rate + admit + settle ----

// Over 80 lines on purpose: set-up, the measured loop and its verification read as one op.
void op_quota() {
  if (!selected("quota_request")) {
    return;
  }
  constexpr int64_t kSec = 1000000000;
  constexpr uint64_t kIters = 6400;  // a multiple of 64: exactly 100 journal writes
  char tmpl[] = "/tmp/tollgate-gate-quota-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    die("quota_request", "mkdtemp failed");
  }
  const std::string dir = tmpl;
  quota::plan_map plans;
  quota::plan big;
  big.name = "big";
  big.rate_per_sec = 1e9;
  big.burst = 1000000000;
  big.monthly_quota = int64_t{1} << 40;
  big.overage = quota::overage_policy::stop;
  plans["big"] = big;
  quota::created_key key;
  {
    quota::key_store store(dir);
    auto k = store.create_key("gate", "big", plans, 0);
    if (!k) {
      die("quota_request", "creating the key failed");
    }
    key = *k;
  }
  // A fixed instant mid-month, so the month boundary is never crossed.
  const int64_t t0 = (quota::days_from_civil(2026, 12, 2) * 86400 + 43200) * kSec;
  quota::service_options o;
  o.data_dir = dir;
  o.plans = plans;
  o.cores = 1;
  o.reconcile_ms = 1000;
  auto svc_r = quota::service::open(o, t0);
  if (!svc_r) {
    die("quota_request", "opening the quota service failed");
  }
  std::unique_ptr<quota::service> svc = std::move(*svc_r);
  quota::core_ledger& s = svc->ledger(0);
  int64_t now = t0;
  int in_pass = 0;
  uint64_t refused = 0;
  // One billable request; every 64 requests the loop pass ends (journal write, quiescent point).
  auto once = [&] {
    const quota::key_record* r = s.authenticate(key.secret);
    quota::figures f;
    quota::ticket t;
    if (r == nullptr || s.check_rate(*r, now, f) != quota::rate_verdict::ok ||
        s.admit(*r, now, f, t) != quota::admit_verdict::ok) {
      ++refused;
    } else {
      s.settle(t, true);
    }
    keep(f);
    if (++in_pass == 64) {
      in_pass = 0;
      s.before_send(now);
      now += 1000;
    }
  };
  // Verification: a wrong key is refused; the right one is admitted and billed exactly once.
  if (s.authenticate("tg_live_0000000000000000000000000000000000000000") != nullptr) {
    die("quota_request", "an unknown key authenticated");
  }
  once();
  s.before_send(now);
  in_pass = 0;
  s.reconcile(now);
  const quota::key_record* r = s.authenticate(key.secret);
  if (refused != 0 || r == nullptr || svc->usage(r->key_id, svc->month()).used != 1) {
    die("quota_request", "the first request was not admitted and billed once");
  }
  measure("quota_request", kIters, once);
  s.before_send(now);
  s.reconcile(now);
  r = s.authenticate(key.secret);
  const uint64_t warm = warm_up_of(kIters * g_scale);
  if (refused != 0 || r == nullptr ||
      svc->usage(r->key_id, svc->month()).used !=
          static_cast<int64_t>(1 + warm + kIters * g_scale)) {
    die("quota_request", "usage does not match the requests admitted");
  }
  svc->close(now);
  svc.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// ---- search on the sample corpus ----

struct search_case {
  const char* name;
  const char* query;
  uint64_t total;  ///< matches in the sample corpus (seed search::sample_seed)
};

// Totals as the sample corpus answers them (10,000 generated stories, fixed seed). If the sample
// generator or the matching rules change deliberately, update them here (the op fails loudly
// otherwise, and the instruction baseline needs --accept anyway).
constexpr search_case kSearchCases[] = {
    {"search_1term", "rust", 1909},
    {"search_3term", "linux kernel scheduler", 3},
    {"search_phrase", "\"the kernel\"", 100},
};

void op_search() {
  bool any = false;
  for (const auto& c : kSearchCases) {
    any = selected(c.name) || any;  // every name is listed under --list
  }
  if (!any) {
    return;
  }
  std::unique_ptr<search::backend> b = search::load_sample(4);
  if (b == nullptr || b->story_count() != search::sample_count) {
    die("search", "the sample corpus did not load");
  }
  auto s = b->make_scratch();
  out_buffer out(1 << 16);
  for (const auto& c : kSearchCases) {
    if (!selected(c.name)) {
      continue;
    }
    search::query_args a;
    a.query = c.query;
    // Verify: the rendered payload starts with the known total and holds min(total, limit)
    // stories, and search() + render() writes the same bytes as search_stories().
    out.clear();
    if (!b->search_stories(a, *s, out, false)) {
      die(c.name, "search_stories failed");
    }
    const std::string rendered(out.view());
    const std::string head = "{\"total\":" + std::to_string(c.total) + ",\"stories\":[";
    size_t stories = 0;
    for (size_t p = rendered.find("{\"id\":"); p != std::string::npos;
         p = rendered.find("{\"id\":", p + 1)) {
      ++stories;
    }
    const uint64_t want_stories = c.total < a.limit ? c.total : a.limit;
    if (rendered.rfind(head, 0) != 0 || stories != want_stories) {
      std::fprintf(stderr, "got: %.300s\n", rendered.c_str());
      die(c.name, "wrong total or number of stories");
    }
    auto sr = b->search(a, *s);
    if (!sr || sr->total != c.total || sr->partial()) {
      die(c.name, "search() disagrees with search_stories()");
    }
    out.clear();
    json_out j(out, false);
    b->render(*sr, j);
    if (out.view() != rendered) {
      die(c.name, "render() disagrees with search_stories()");
    }
    // Measured: the MCP form (nested: escaped for the text block), as tools/call renders it.
    measure(c.name, 100, [&] {
      out.clear();
      keep(b->search_stories(a, *s, out, true).has_value());
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--list") {
      g_list = true;
    } else if (arg == "--scale" && i + 1 < argc) {
      g_scale = std::strtoull(argv[++i], nullptr, 10);
      if (g_scale == 0) {
        g_scale = 1;
      }
    } else if (arg == "--only" && i + 1 < argc) {
      g_only.emplace_back(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--list] [--scale K] [--only NAME]...\n", argv[0]);
      return 2;
    }
  }
  op_http_parse();
  op_mcp_call();
  op_envelope_success();
  op_envelope_tool_errors();
  op_quota();
  op_search();
  if (g_failures != 0) {
    std::fprintf(stderr, "gate_hot_paths: %d op(s) allocated in the steady state\n", g_failures);
    return 1;
  }
  return 0;
}
