#!/usr/bin/env bash
# Installs everything tollgate needs to build, test and benchmark on Debian 12, from Debian's
# packages (and the npm registry for the real MCP clients used by the integration tests).
# Safe to run again: apt and npm skip what is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi

pkgs=(
  build-essential cmake ninja-build pkg-config git
  liburing-dev libsimdjson-dev libfmt-dev libmimalloc-dev libtomlplusplus-dev libssl-dev
  libcurl4-openssl-dev openssl   # stdio --remote: its HTTP(S) client; its tests make a cert
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  valgrind
  libhiredis-dev redis-server   # cluster mode: the Redis client, and the server its tests start
  libzstd-dev   # the index's stored texts, compressed (src/search/story_pack.cc)
  python3   # tests/integration/fts5_equivalence.py (its sqlite3 module: SQLite with FTS5), perf/gate
  clang-format-14   # tools/check-format.sh (run by tools/test.sh)
  dpkg-dev systemd   # packaging.deb: cpack's dpkg-shlibdeps, systemd-analyze verify on the unit
  chromium   # integration.cors_browser: a real browser page calls /mcp cross-origin (headless)
  xdg-utils   # integration.oauth: mcp-remote opens its authorization URL with xdg-open
)
command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
if [ "${1:-}" = "--perf" ]; then
  pkgs+=(clang-14 libclang-rt-14-dev valgrind wrk nginx-light sqlite3 hyperfine)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Real MCP clients for the integration tests (tests/integration/clients/package.json pins them).
if [ -f "$here/tests/integration/clients/package.json" ]; then
  if [ -f "$here/tests/integration/clients/package-lock.json" ]; then
    (cd "$here/tests/integration/clients" && npm ci --no-audit --no-fund --loglevel=error)
  else
    (cd "$here/tests/integration/clients" && npm install --no-audit --no-fund --loglevel=error)
  fi
fi
