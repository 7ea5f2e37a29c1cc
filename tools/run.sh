#!/usr/bin/env bash
# Sets up, builds (release) and runs tollgate on its embedded default: the sample corpus on
# 127.0.0.1:8080, data in ./tollgate-data, a demo key printed on first start. Extra arguments
# go to `tollgate serve` (see `tollgate serve --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target tollgate
exec build/release/tollgate serve --sample "$@"
