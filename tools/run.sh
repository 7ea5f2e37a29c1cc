#!/usr/bin/env bash
# Sets up, builds (release) and runs tollgate on its embedded default: the sample corpus on
# 127.0.0.1:8080, data in ./tollgate-data, a demo key printed on first start, and OAuth 2.1 on
# that loopback listener (--oauth), so an OAuth-only client (the MCP Inspector, mcp-remote)
# connects with the URL and the demo key pasted on the consent page. Extra arguments go to
# `tollgate serve` (see `tollgate serve --help`); a non-loopback --listen needs [oauth] issuer.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target tollgate
exec build/release/tollgate serve --sample --oauth "$@"
