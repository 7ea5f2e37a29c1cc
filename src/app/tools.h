// The MCP tools of design §4 (search_stories, get_story, get_usage), adapters from validated
// MCP arguments to the search backend and the quota figures. Their payloads are written by the
// same renderers as the REST bodies, so the text block equals the REST body byte for byte.
#pragma once

#include "tollgate/mcp/tool.h"

namespace tollgate::app {

/// Registers the three tools. The tools reach per-core state through the core_host passed as
/// call_context::caller, so `call_context::caller` must be an app::core_host.
void register_tools(mcp::registry& reg);

}  // namespace tollgate::app
