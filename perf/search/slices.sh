#!/usr/bin/env bash
# Light MCP calls beside heavy ones on one core, with searches in slices on and off.
#
#   perf/search/slices.sh [--count N] [--seed S] [--duration 10s] [--slice P] [--build DIR]
#
# Serves `tollgate corpus generate --count N --seed S` (default 200000, 1) on one core (core 0,
# answer cache off: a stream of distinct queries) and drives it from core 1 with two loadgens
# at once over HTTP: "heavy" (2 connections, search_stories of a phrase of three common words,
# which reads the positions of every doc holding both of its pairs; phrases of two common
# words, alone or beside terms, are quick pair-term searches) and "light" (8 connections,
# search_stories of a word in no story, and tools/list). Runs three times: light alone, light
# + heavy with search_slice_postings = 0 (each search runs whole), light + heavy with slices
# of P postings (default 16384, the shipped default). Prints the light calls' p50/p99 and the
# heavy calls' rate and p50/p99 for each run. Every process it starts is stopped by its PID.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

COUNT=200000
SEED=1
DURATION=10s
SLICE=16384
BUILD="$PERF_ROOT/build/release"
while [ $# -gt 0 ]; do
  case "$1" in
    --count) COUNT=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --slice) SLICE=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) perf_die "unknown argument $1" ;;
  esac
done
TG="$BUILD/tollgate"
LG="$BUILD/tools/loadgen/loadgen"
[ -x "$TG" ] && [ -x "$LG" ] || perf_die "build the tollgate and loadgen targets in $BUILD"
perf_init

CORPUS=$(perf_corpus "$TG" "$COUNT" "$SEED" /tmp/tollgate-slices)

run() {  # run NAME SLICE HEAVY(0|1)
  local name=$1 slice=$2 heavy=$3 dir port key
  dir="$PERF_TMP/$name"
  mkdir -p "$dir/data"
  cat >"$dir/config.toml" <<TOML
[plans.big]
rate_per_sec = 100000000
burst = 100000000
monthly_quota = 1000000000000
overage = "bill"

[corpus]
search_cache_entries = 0
search_slice_postings = $slice
TOML
  key=$("$TG" keys create --account perf --plan big --data-dir "$dir/data" --config "$dir/config.toml" | head -1)
  port=$(perf_free_port)
  perf_start "$name-server" 0 "$TG" serve --config "$dir/config.toml" --data-dir "$dir/data" \
    --listen "127.0.0.1:$port" --threads 1 --corpus "$CORPUS"
  local server=$PERF_LAST_PID
  perf_wait_http "http://127.0.0.1:$port/healthz" 300 || perf_die "server did not start (see $PERF_TMP/$name-server.log)"
  local hpid=""
  if [ "$heavy" = 1 ]; then
    taskset -c 1 "$LG" -c 2 --warmup 1s -d "$DURATION" --key "$key" --req call \
      --query '"of the a"' --query '"in the of"' --query '"to the a"' --query '"and the of"' \
      --json "http://127.0.0.1:$port/mcp" >"$dir/heavy.json" 2>"$dir/heavy.err" &
    hpid=$!
    PERF_PIDS+=("$hpid")
  fi
  taskset -c 1 "$LG" -c 8 --warmup 1s -d "$DURATION" --key "$key" --req call@3 --req list \
    --query xyzzyplughnothing --json "http://127.0.0.1:$port/mcp" >"$dir/light.json" 2>"$dir/light.err"
  [ -n "$hpid" ] && wait "$hpid"
  perf_stop "$server"
  python3 - "$name" "$dir" <<'PY'
import json, os, sys
name, d = sys.argv[1], sys.argv[2]
def fig(f):
    p = os.path.join(d, f)
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        return "-"
    j = json.load(open(p))
    l = j["latency_us"]
    return f'{j.get("rps", j.get("requests_per_sec", 0)):.0f} req/s, p50 {l["p50"]:.0f} us, p99 {l["p99"]:.0f} us'
print(f"{name:16s} light: {fig('light.json'):44s} heavy: {fig('heavy.json')}")
PY
}

echo "corpus: $COUNT stories (seed $SEED), server on 1 core, loadgens on another, $DURATION each"
run light-alone "$SLICE" 0
run whole 0 1
run sliced "$SLICE" 1
