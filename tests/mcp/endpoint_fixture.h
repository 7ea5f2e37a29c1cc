// The endpoint_test fixture: one endpoint over the fake search tool and a fake host, driven
// through handle_http by `post`; shared by the endpoint's tests (dispatch, arguments, JSON-RPC
// scan, HTTP transport, allocations).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "mcp/mcp_fixture.h"
#include "tollgate/mcp/endpoint.h"

namespace tollgate::mcp::test_support {

class endpoint_test : public ::testing::Test {
 protected:
  endpoint_test() { ep.lend(nullptr, &h); }  // the fake's figures: the answers' header lines

  std::shared_ptr<fake_search> search = std::make_shared<fake_search>();
  registry tools = make_registry(search);
  envelope::cache env{envelope::server_identity{}};
  endpoint ep{tools, env};
  fake_host h;
  out_buffer out;

  http_reply post(const std::string& body) {
    http_case c;
    c.body = body;
    return run(ep, h, c, out);
  }
  http_reply post(http_case c) { return run(ep, h, c, out); }
  static http_case modern(const std::string& method, const std::string& body) {
    http_case c;
    c.body = body;
    c.set("MCP-Protocol-Version", "2026-07-28").set("Mcp-Method", method);
    return c;
  }
  static std::string call(const std::string& args, const std::string& id = "7",
                          const std::string& name = "search_stories") {
    return R"({"jsonrpc":"2.0","id":)" + id + R"(,"method":"tools/call","params":{"name":")" +
           name + R"(","arguments":)" + args + "}}";
  }
};

}  // namespace tollgate::mcp::test_support
