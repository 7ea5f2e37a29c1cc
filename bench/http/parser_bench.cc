// Parser benchmarks: a realistic MCP Streamable-HTTP POST (10 headers and a ~250-byte JSON-RPC
// tools/call body), a minimal GET /healthz, and the response writer. Each verifies its output
// once before timing and reports bytes/s, items/s (requests) and allocs_per_op.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "support/alloc_counter.h"
#include "tollgate/http/parser.h"
#include "tollgate/http/response.h"
#include "tollgate/http/router.h"

namespace {

using namespace tollgate;
using namespace tollgate::http;

/// Allocations per call of f over 1000 untimed calls after the verified first one (the timed
/// loop itself would also count the framework's own bookkeeping).
template <class F>
double allocs_per_op(F&& f) {
  test::alloc_scope scope;
  for (int i = 0; i < 1000; ++i) {
    f();
  }
  return static_cast<double>(scope.count()) / 1000.0;
}

std::string mcp_body() {
  std::string b =
      R"({"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_stories",)"
      R"("arguments":{"query":"io_uring zero copy networking","limit":10,"offset":0,)"
      R"("sort":"relevance","tags":["linux","performance"],"since":"2025-01-01T00:00:00Z"},)"
      R"("_meta":{"progressToken":"tok-7f3a"}}})";
  while (b.size() < 250) {
    b.insert(b.size() - 1, " ");
  }
  return b;
}

std::string mcp_post() {
  const std::string body = mcp_body();
  return "POST /mcp HTTP/1.1\r\n"
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
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

bool verify_mcp(const std::string& wire, const request& req, const parse_result& r) {
  return r.status == parse_status::complete && r.consumed == wire.size() && req.method == "POST" &&
         req.path == "/mcp" && req.num_headers == 10 && req.body == mcp_body() && req.keep_alive &&
         req.header_value("mcp-protocol-version") == "2025-06-18";
}

void BM_parse_mcp_post(benchmark::State& state) {
  std::string wire = mcp_post();
  request req;
  const limits lim;
  {
    const parse_result r = parse_request(wire.data(), wire.size(), lim, req);
    if (!verify_mcp(wire, req, r)) {
      state.SkipWithError("MCP POST did not parse as expected");
      return;
    }
  }
  const double allocs = allocs_per_op(
      [&] { benchmark::DoNotOptimize(parse_request(wire.data(), wire.size(), lim, req)); });
  for (auto _ : state) {
    const parse_result r = parse_request(wire.data(), wire.size(), lim, req);
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(req);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * wire.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["allocs_per_op"] = allocs;
  state.counters["request_bytes"] = static_cast<double>(wire.size());
}
BENCHMARK(BM_parse_mcp_post);

void BM_parse_pipelined_mcp_posts(benchmark::State& state) {
  // 16 requests back to back in one buffer, as a pipelining client delivers them.
  const std::string one = mcp_post();
  std::string wire;
  for (int i = 0; i < 16; ++i) {
    wire += one;
  }
  request req;
  const limits lim;
  {
    size_t off = 0;
    int n = 0;
    while (off < wire.size()) {
      const parse_result r = parse_request(wire.data() + off, wire.size() - off, lim, req);
      if (r.status != parse_status::complete || req.body != mcp_body()) {
        state.SkipWithError("pipelined MCP POSTs did not parse as expected");
        return;
      }
      off += r.consumed;
      ++n;
    }
    if (n != 16) {
      state.SkipWithError("wrong request count");
      return;
    }
  }
  auto all = [&] {
    size_t off = 0;
    while (off < wire.size()) {
      const parse_result r = parse_request(wire.data() + off, wire.size() - off, lim, req);
      benchmark::DoNotOptimize(req);
      off += r.consumed;
    }
  };
  const double allocs = allocs_per_op(all);
  for (auto _ : state) {
    all();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * wire.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * 16));
  state.counters["allocs_per_op"] = allocs;
}
BENCHMARK(BM_parse_pipelined_mcp_posts);

void BM_parse_get_healthz(benchmark::State& state) {
  std::string wire = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\n\r\n";
  request req;
  const limits lim;
  {
    const parse_result r = parse_request(wire.data(), wire.size(), lim, req);
    if (r.status != parse_status::complete || req.path != "/healthz") {
      state.SkipWithError("GET /healthz did not parse as expected");
      return;
    }
  }
  const double allocs = allocs_per_op(
      [&] { benchmark::DoNotOptimize(parse_request(wire.data(), wire.size(), lim, req)); });
  for (auto _ : state) {
    const parse_result r = parse_request(wire.data(), wire.size(), lim, req);
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(req);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * wire.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["allocs_per_op"] = allocs;
}
BENCHMARK(BM_parse_get_healthz);

void BM_parse_route_and_respond(benchmark::State& state) {
  // The whole HTTP-layer cost of one MCP request: parse, route, write a patched-length answer.
  std::string wire = mcp_post();
  router rt;
  rt.add("POST", "/mcp", 1);
  rt.add("GET", "/healthz", 2);
  rt.add_prefix("GET", "/v1/stories/", 3);
  date_cache date;
  date.update(1'700'000'000'000'000'000);
  out_buffer out(4096);
  request req;
  const limits lim;
  const std::string_view result =
      R"({"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"{}"}],"isError":false}})";
  auto once = [&]() {
    out.clear();
    const parse_result r = parse_request(wire.data(), wire.size(), lim, req);
    const route_match m = rt.match(req.method, req.path);
    response_head h = head_for(req, m.status);
    h.content_type = "application/json";
    h.date_line = date.header_line();
    const pending_response p = begin_response(out, h);
    out.append(result);
    end_response(out, p);
    return r.status == parse_status::complete && m.id == 1;
  };
  if (!once() || out.view().find("Content-Length:") == std::string_view::npos) {
    state.SkipWithError("parse/route/respond did not work");
    return;
  }
  const double allocs = allocs_per_op(once);
  for (auto _ : state) {
    benchmark::DoNotOptimize(once());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * wire.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["allocs_per_op"] = allocs;
}
BENCHMARK(BM_parse_route_and_respond);

}  // namespace

BENCHMARK_MAIN();
