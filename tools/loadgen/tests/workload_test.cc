// Request rendering (workload.cc): MCP calls with their headers and length, bad specs refused,
// Zipf key choice.
#include "workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

namespace tollgate::loadgen {
namespace {

TEST(loadgen_workload_test, renders_mcp_call_with_headers_and_length) {
  // Verifies the tools/call request carries the MCP headers, the key, an exact Content-Length
  // and a JSON-escaped query.
  workload_config cfg;
  cfg.keys = {"k1"};
  cfg.queries = {"say \"hi\""};
  request_spec s;
  std::string err;
  ASSERT_TRUE(parse_request_spec("call@3", s, err)) << err;
  EXPECT_EQ(s.weight, 3u);
  cfg.mix = {s};
  workload w;
  ASSERT_TRUE(w.build(cfg, err)) << err;
  std::string out;
  std::string tmp;
  w.render(out, tmp, 0, 0, 0, 42);
  std::string body =
      R"({"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"say \"hi\""}}})";
  EXPECT_NE(out.find("POST /mcp HTTP/1.1\r\n"), std::string::npos);
  EXPECT_NE(out.find("Accept: application/json, text/event-stream\r\n"), std::string::npos);
  EXPECT_NE(out.find("MCP-Protocol-Version: 2025-06-18\r\n"), std::string::npos);
  EXPECT_NE(out.find("Authorization: Bearer k1\r\n"), std::string::npos);
  EXPECT_NE(out.find("Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body),
            std::string::npos);
}

TEST(loadgen_workload_test, rejects_bad_specs) {
  // Verifies unknown kinds and zero weights are refused with a message.
  request_spec s;
  std::string err;
  EXPECT_FALSE(parse_request_spec("delete", s, err));
  EXPECT_FALSE(parse_request_spec("call@0", s, err));
  EXPECT_FALSE(parse_request_spec("get:nopath", s, err));
  EXPECT_TRUE(parse_request_spec("get:/healthz", s, err));
  EXPECT_EQ(s.path, "/healthz");
}

TEST(loadgen_workload_test, zipf_prefers_the_first_key) {
  // Verifies key 0 is drawn more often than key 9 under Zipf s=1, and every key is drawn.
  workload_config cfg;
  for (int i = 0; i < 10; i++) {
    std::string key = "k";
    key += static_cast<char>('0' + i);
    cfg.keys.push_back(key);
  }
  cfg.mix = {request_spec{}};
  cfg.mix[0].path = "/";
  workload w;
  std::string err;
  ASSERT_TRUE(w.build(cfg, err)) << err;
  picker p(w, 1);
  std::vector<int> seen(10);
  for (int i = 0; i < 100000; i++) {
    seen[p.key()]++;
  }
  EXPECT_GT(seen[0], 3 * seen[9]);
  for (int n : seen) {
    EXPECT_GT(n, 0);
  }
}

TEST(loadgen_workload_test, query_zipf_follows_the_weights_and_defaults_to_uniform) {
  // Verifies --query-zipf 1.1 draws query i about as often as 1/(i+1)^1.1 of the total, every
  // query at least once, and that without it the draw stays uniform.
  workload_config cfg;
  for (int i = 0; i < 100; i++) {
    cfg.queries.push_back("q" + std::to_string(i));
  }
  cfg.mix = {request_spec{req_kind::mcp_call, "", 1}};
  std::string err;
  workload uniform;
  ASSERT_TRUE(uniform.build(cfg, err)) << err;
  EXPECT_TRUE(uniform.query_cdf().empty());
  cfg.query_zipf_s = 1.1;
  workload zipf;
  ASSERT_TRUE(zipf.build(cfg, err)) << err;
  double norm = 0;
  for (int i = 0; i < 100; i++) {
    norm += 1.0 / std::pow(i + 1.0, 1.1);
  }
  constexpr int draws = 400000;
  std::vector<int> z(100), u(100);
  picker pz(zipf, 7), pu(uniform, 7);
  for (int i = 0; i < draws; i++) {
    z[pz.query()]++;
    u[pu.query()]++;
  }
  for (int i : {0, 1, 9, 99}) {
    double want = draws / std::pow(i + 1.0, 1.1) / norm;
    EXPECT_NEAR(z[i], want, 0.1 * want + 50) << "query " << i;
  }
  for (int i = 0; i < 100; i++) {
    EXPECT_GT(z[i], 0);
    EXPECT_NEAR(u[i], draws / 100.0, draws / 100.0 * 0.1) << "query " << i;
  }
}

}  // namespace
}  // namespace tollgate::loadgen
