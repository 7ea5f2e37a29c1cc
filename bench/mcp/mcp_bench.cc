// MCP endpoint benchmarks: decode + dispatch + envelope of one POST /mcp (tools/call with a
// trivial tool, so the figure excludes the tool's own work), plus tools/list and a schema error.
// Each verifies its response once before timing and reports items/s and allocs_per_op.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "support/alloc_counter.h"
#include "tollgate/envelope/envelope.h"
#include "tollgate/mcp/endpoint.h"

namespace {

using namespace tollgate;

template <class F>
double allocs_per_op(F&& f) {
  test::alloc_scope scope;
  for (int i = 0; i < 1000; ++i) {
    f();
  }
  return static_cast<double>(scope.count()) / 1000.0;
}

class tiny_tool : public mcp::tool {
 public:
  mcp::tool_result call(const mcp::arguments& a, json_out& out, mcp::call_context&) override {
    out.raw("{\"total\":0,\"query\":");
    out.string(a[0].str);
    out.raw("}");
    return mcp::tool_result::success();
  }
};

class bench_host : public mcp::host, public mcp::rate_charge {
 public:
  void write_headers(out_buffer& out) override {
    out.append(
        "X-RateLimit-Limit: 10\r\nX-RateLimit-Remaining: 9\r\nX-RateLimit-Reset: 1\r\n"
        "X-Quota-Limit: 1000\r\nX-Quota-Used: 10\r\nX-Quota-Remaining: 990\r\n"
        "X-Quota-Reset: 2419200\r\n");
  }
  mcp::admission admit(std::string_view, std::string_view) override { return {}; }
  void settle(bool) override {}
  mcp::admission rate_check() override { return {}; }
  mcp::admission charge_extra() override { return {}; }
  void refund() override {}
};

struct fixture {
  envelope::cache env{envelope::server_identity{}};
  mcp::registry tools;
  std::unique_ptr<mcp::endpoint> ep;
  bench_host host;
  fixture() {
    mcp::tool_def t;
    t.name = "search_stories";
    t.title = "Search stories";
    t.description = "Search the story index.";
    t.args = {
        {"query",
         mcp::arg_type::string,
         "What to search for.",
         true,
         1,
         500,
         true,
         true,
         {},
         false,
         0,
         {}},
        {"limit", mcp::arg_type::integer, "Results.", false, 1, 50, true, true, {}, true, 10, {}},
        {"offset", mcp::arg_type::integer, "Skip.", false, 0, 1000, true, true, {}, true, 0, {}},
        {"sort",
         mcp::arg_type::enumeration,
         "Order.",
         false,
         0,
         0,
         false,
         false,
         {"relevance", "date"},
         true,
         0,
         "relevance"},
        {"tags", mcp::arg_type::string_array, "Tags.", false, 0, 16, false, true, {}, false, 0, {}},
        {"since", mcp::arg_type::string, "From.", false, 0, 40, false, true, {}, false, 0, {}},
    };
    t.impl = std::make_shared<tiny_tool>();
    tools.add(std::move(t));
    tools.finish();
    ep = std::make_unique<mcp::endpoint>(tools, env);
    ep->lend(nullptr, &host);
  }
};

struct request_holder {
  std::string padded;
  http::request req;
  explicit request_holder(const std::string& body, const char* version = nullptr) {
    padded = body + std::string(mcp::body_padding, ' ');
    req.method = "POST";
    req.path = "/mcp";
    req.target = "/mcp";
    req.add_header("Host", "127.0.0.1:8080");
    req.add_header("Accept", "application/json, text/event-stream");
    req.add_header("Content-Type", "application/json");
    req.add_header("Authorization", "Bearer tg_0123456789abcdef");
    if (version != nullptr) {
      req.add_header("MCP-Protocol-Version", version);
    }
    req.body = std::string_view(padded.data(), body.size());
  }
};

const std::string kCall =
    R"({"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_stories",)"
    R"("arguments":{"query":"io_uring zero copy networking","limit":10,"offset":0,)"
    R"("sort":"relevance","tags":["linux","performance"],"since":"2025-01-01T00:00:00Z"},)"
    R"("_meta":{"progressToken":"tok-7f3a"}}})";

void run_request(benchmark::State& state, const std::string& body, const char* version,
                 int want_status, std::string_view must_contain) {
  static fixture f;
  request_holder rh(body, version);
  out_buffer out(64 * 1024);
  auto once = [&] {
    out.clear();
    return f.ep->handle_http(rh.req, f.host, out);
  };
  http::response_info info = once();
  if (info.status != want_status || out.view().find(must_contain) == std::string_view::npos) {
    state.SkipWithError("unexpected response");
    return;
  }
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(f.ep->handle_http(rh.req, f.host, out));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
  state.counters["allocs_per_op"] = allocs_per_op(once);
  state.counters["resp_bytes"] = static_cast<double>(out.size());
}

void BM_tools_call_decode_dispatch_envelope(benchmark::State& state) {
  run_request(state, kCall, "2025-06-18", 200, R"(\"query\":\"io_uring zero copy networking\")");
}
BENCHMARK(BM_tools_call_decode_dispatch_envelope);

void BM_tools_call_modern(benchmark::State& state) {
  // 2026-07-28 without Mcp-Method: measures the -32020 path (header check fails fast).
  run_request(state, kCall, "2026-07-28", 400, "-32020");
}
BENCHMARK(BM_tools_call_modern);

void BM_tools_call_schema_error(benchmark::State& state) {
  std::string body = kCall;
  body.replace(body.find("\"limit\":10"), 10, "\"limit\":99");
  run_request(state, body, "2025-06-18", 200, "-32602");
}
BENCHMARK(BM_tools_call_schema_error);

void BM_tools_list(benchmark::State& state) {
  run_request(state, R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})", "2025-06-18", 200,
              "inputSchema");
}
BENCHMARK(BM_tools_list);

void BM_ping(benchmark::State& state) {
  run_request(state, R"({"jsonrpc":"2.0","id":2,"method":"ping"})", "2025-06-18", 200, "result");
}
BENCHMARK(BM_ping);

}  // namespace
BENCHMARK_MAIN();
