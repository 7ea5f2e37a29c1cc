// shard_node: the node side of the fleet (--role shard). app/shard_handler authenticates a
// request and hands its method, decoded path and body here; the answer comes from the node's
// backend. The wire format is fleet_wire.h's.
#pragma once

#include <string_view>

#include "tollgate/common/buffer.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/fleet_wire.h"

namespace tollgate::search {

/// Shard node side: answers one fleet request (method, path without query, body) against the
/// node's backend. The path comes decoded: for a story, story_prefix + the id as it is (the
/// caller resolved the percent-escapes of write_story_path()). Writes a JSON body to `out` and
/// returns the HTTP status: 200; 400 with {"code":"invalid_request","message":...} for a
/// malformed body; 404 {"code":"not_found"} for an unknown story, path or method; 503
/// {"code":"unavailable",...} when no in-process slice of the node could answer. `body` must be
/// followed by 64 readable bytes (simdjson padding). Authentication (the secret header) is the
/// caller's. Allocation-free in the steady state (the scratch keeps its capacity), except for 400
/// answers. `nowait` (may be null): a story's text is read without waiting for the disk; bytes
/// the page cache lacks make it write nothing and return 0, `nowait` saying which (the caller
/// brings them in and asks again: backend::render_story).
int serve_fleet_request(const backend& b, scratch& s, std::string_view method,
                        std::string_view path, std::string_view body, out_buffer& out,
                        pending_read* nowait = nullptr);

}  // namespace tollgate::search
