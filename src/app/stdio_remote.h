// `tollgate stdio --remote URL`: the stdio bridge desktop MCP clients launch, forwarding each
// JSON-RPC line to a tollgate server over HTTP(S) (libcurl) so that the key, its rate limit and
// its quota are enforced by the server, however many bridges run at once.
#pragma once

#include <cstdint>
#include <string>

#include "cli.h"
#include "tollgate/common/result.h"

namespace tollgate::app {

struct remote_options {
  std::string url;     ///< the server's MCP endpoint, http:// or https://
  std::string cacert;  ///< PEM CA bundle to verify the server with; empty: the system's store
  int64_t timeout_ms = 30000;  ///< per POST, connecting included
};

/// True when the arguments after `stdio` ask for the bridge (`--remote` is among them).
bool wants_remote(int argc, char** argv);

/// Parses the arguments after `stdio` of a bridge: --remote URL, --cacert FILE, --timeout-ms N,
/// --help. A local-corpus flag next to --remote is refused by name.
result<remote_options, cli_error> parse_remote_args(int argc, char** argv);

/// Runs the bridge (key from TOLLGATE_API_KEY). Returns the exit code: 0 once stdin is closed
/// (or SIGTERM/SIGINT) and every message read is answered; 2 on bad usage or a key the server
/// refuses (401); 1 when stdout or stdin fail.
int run_stdio_remote(int argc, char** argv);

}  // namespace tollgate::app
