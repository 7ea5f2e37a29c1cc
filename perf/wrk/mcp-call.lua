-- wrk script: POST an MCP tools/call of search_stories, byte for byte the body that
-- `loadgen --req call --fixed-id --query Q --key K` sends (JSON-RPC id 1, one query).
-- Environment: MCP_KEY (Authorization: Bearer; omitted when empty), MCP_QUERY (default "rust";
-- must need no JSON escaping), MCP_PATH (default /mcp), MCP_PROTOCOL_VERSION (default
-- 2025-06-18). No request()/response() callbacks, so wrk sends a pre-built request and its
-- per-request cost stays its floor.
local key = os.getenv("MCP_KEY") or ""
local query = os.getenv("MCP_QUERY") or "rust"
local version = os.getenv("MCP_PROTOCOL_VERSION") or "2025-06-18"

wrk.method = "POST"
wrk.path = os.getenv("MCP_PATH") or "/mcp"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories",'
  .. '"arguments":{"query":"' .. query .. '"}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = version
if key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end
