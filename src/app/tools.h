// The MCP tools of design §4 (search_stories, get_story, get_usage), adapters from validated
// MCP arguments to the search backend and the quota figures. Their payloads are written by the
// same renderers as the REST bodies, so the text block equals the REST body byte for byte.
#pragma once

#include "tollgate/mcp/endpoint.h"
#include "tollgate/mcp/tool.h"

namespace tollgate::app {

class fleet_client;

/// Registers the three tools. The tools reach per-core state through the core_host passed as
/// call_context::caller, so `call_context::caller` must be an app::core_host.
void register_tools(mcp::registry& reg);

/// A gateway's look-ahead (fleet_client step 1): the remote searches and story look-ups of the
/// tool calls the endpoint decided for a request (mcp::endpoint::decide_calls), recorded in
/// `fleet` as the tools would ask for them. Core-local.
class fleet_calls final : public mcp::call_visitor {
 public:
  explicit fleet_calls(fleet_client& fleet) : fleet_(fleet) {}
  void on_call(const mcp::decided_call& call) override;

 private:
  fleet_client& fleet_;
};

}  // namespace tollgate::app
