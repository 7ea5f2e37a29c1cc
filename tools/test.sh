#!/usr/bin/env bash
# Sets up, builds and runs every test: `tools/test.sh` runs the release and the asan (ASan+UBSan)
# presets, which is what CI runs; `tools/test.sh PRESET...` runs only those presets.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/check-format.sh
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release asan)
jobs=$(nproc)
for p in "${presets[@]}"; do
  echo "== preset $p: configure and build"
  cmake --preset "$p" >/dev/null
  cmake --build --preset "$p" -j "$jobs"
  echo "== preset $p: test"
  ctest --preset "$p" -j "$jobs" --timeout 600
done
