// The endpoint as a whole (endpoint.cc): a warm tools/call, -32602 and tool error allocate
// nothing.
#include "tollgate/mcp/endpoint.h"

#include <gtest/gtest.h>

#include <string>

#include "mcp/endpoint_fixture.h"
#include "mcp/mcp_fixture.h"
#include "support/alloc_counter.h"
#include "tollgate/envelope/reference.h"

namespace tollgate::mcp {
namespace {

using namespace test_support;
using envelope::revision;

// ---- allocations ----

TEST_F(endpoint_test, tools_call_allocates_nothing_after_warm_up) {
  // Verifies decode + dispatch + tool + envelope of a tools/call (and a -32602 and a tool
  // error) make zero allocations once buffers are warm.
  std::string ok_body = call(R"({"query":"rust","limit":5,"tags":["a","b"]})");
  std::string bad_body = call(R"({"query":"rust","limit":500})");
  std::string err_body = call(R"({"query":"outage"})");
  std::vector<std::string> padded;
  std::vector<http::request> reqs;
  for (const auto& b : {ok_body, bad_body, err_body}) {
    padded.push_back(b + std::string(64, ' '));
  }
  for (size_t i = 0; i < padded.size(); ++i) {
    http::request req;
    req.method = "POST";
    req.path = "/mcp";
    req.add_header("Accept", "application/json, text/event-stream");
    req.add_header("Content-Type", "application/json");
    req.body = std::string_view(padded[i].data(), padded[i].size() - 64);
    reqs.push_back(req);
  }
  struct quiet_host : host, rate_charge {
    void write_headers(out_buffer& o) override { o.append("X-Quota-Used: 1\r\n"); }
    admission admit(std::string_view, std::string_view) override { return {}; }
    void settle(bool) override {}
    admission rate_check() override { return {}; }
    admission charge_extra() override { return {}; }
    void refund() override {}
  } qh;
  ep.lend(nullptr, &qh);
  out_buffer o(64 * 1024);
  for (int warm = 0; warm < 3; ++warm) {
    for (auto& req : reqs) {
      o.clear();
      (void)ep.handle_http(req, qh, o);
    }
  }
  test::alloc_scope scope;
  for (int i = 0; i < 200; ++i) {
    for (auto& req : reqs) {
      o.clear();
      (void)ep.handle_http(req, qh, o);
    }
  }
  EXPECT_EQ(scope.count(), 0u);
  EXPECT_NE(o.view().find("unavailable"), std::string_view::npos);
}

}  // namespace
}  // namespace tollgate::mcp
