#!/usr/bin/env bash
# The server's CPU per heavy search, run in small slices and whole, side by side (issue 33:
# a search that yields resumes where it stopped, so small slices must not cost busy time).
#
#   perf/search/slice-cost.sh [--count N] [--seed S] [--slice P] [--rounds R] [--duration 8s]
#                             [--build DIR]
#
# Serves `tollgate corpus generate --count N --seed S` (default 200000, 1) twice on core 0,
# `--threads 1`, answer cache off: one server with search_slice_postings = P (default 512), one
# with 0 (every search whole). Each round drives each server in turn from core 1 with one
# closed-loop connection of heavy search_stories calls (phrases of three common words, as
# slices.sh's heavy class) for the duration, and reads the server's CPU (utime + stime from
# /proc) before and after: CPU per answered call. Prints each side's median (min-max) over the
# rounds and the ratio sliced / whole. Every process it starts is stopped by its PID.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

COUNT=200000
SEED=1
SLICE=512
ROUNDS=3
DURATION=8s
BUILD="$PERF_ROOT/build/release"
while [ $# -gt 0 ]; do
  case "$1" in
    --count) COUNT=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --slice) SLICE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) perf_die "unknown argument $1" ;;
  esac
done
TG="$BUILD/tollgate"
LG="$BUILD/tools/loadgen/loadgen"
[ -x "$TG" ] && [ -x "$LG" ] || perf_die "build the tollgate and loadgen targets in $BUILD"
perf_init

CORPUS=$(perf_corpus "$TG" "$COUNT" "$SEED" /tmp/tollgate-slices)

declare -A PORT PID KEY
serve() {  # serve NAME SLICE
  local name=$1 slice=$2 dir="$PERF_TMP/$1"
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
  KEY[$name]=$("$TG" keys create --account perf --plan big --data-dir "$dir/data" \
    --config "$dir/config.toml" | head -1)
  PORT[$name]=$(perf_free_port)
  perf_start "$name-server" 0 "$TG" serve --config "$dir/config.toml" --data-dir "$dir/data" \
    --listen "127.0.0.1:${PORT[$name]}" --threads 1 --corpus "$CORPUS"
  PID[$name]=$PERF_LAST_PID
  perf_wait_mcp "$name-server" "${PID[$name]}" "http://127.0.0.1:${PORT[$name]}/mcp" "${KEY[$name]}" ||
    perf_die "$name did not start (see $PERF_TMP/$name-server.log)"
}

drive() {  # drive NAME ROUND: prints the server's CPU microseconds per answered call
  local name=$1 round=$2 t0 t1 out="$PERF_TMP/$1-$2.json"
  if [ -n "${PERF_RECORD:-}" ]; then  # PERF_RECORD=DIR: a perf profile of each side's server
    perf record -q -g -p "${PID[$name]}" -o "$PERF_RECORD/$name-$round.data" >/dev/null 2>&1 &
    PERF_PIDS+=("$!")
  fi
  t0=$(perf_cpu_ticks "${PID[$name]}")
  taskset -c 1 "$LG" -c 1 --warmup 0s -d "$DURATION" --key "${KEY[$name]}" --req call \
    --query '"of the a"' --query '"in the of"' --query '"to the a"' --query '"and the of"' \
    --json "http://127.0.0.1:${PORT[$name]}/mcp" >"$out" 2>"$out.err"
  t1=$(perf_cpu_ticks "${PID[$name]}")
  if [ -n "${PERF_RECORD:-}" ]; then
    kill -INT "${PERF_PIDS[-1]}" 2>/dev/null || true
    wait "${PERF_PIDS[-1]}" 2>/dev/null || true
  fi
  python3 - "$out" "$((t1 - t0))" "$PERF_CLK_TCK" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ticks, hz = int(sys.argv[2]), int(sys.argv[3])
n = j["ok"]
print(f"{ticks / hz * 1e6 / n:.1f} {n} {j['latency_us']['p50']:.0f}" if n else "nan 0 0")
PY
}

serve whole 0
serve sliced "$SLICE"
echo "corpus: $COUNT stories (seed $SEED), one server core; slices of $SLICE postings vs whole;" \
  "$ROUNDS rounds of $DURATION each; $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  # the side that goes first alternates
  if [ $((r % 2)) = 1 ]; then order="whole sliced"; else order="sliced whole"; fi
  for side in $order; do
    read -r us n p50 < <(drive "$side" "$r")
    echo "round $r $side: $us us CPU per call ($n calls, p50 $p50 us)"
    echo "$us" >>"$PERF_TMP/$side.us"
  done
done
read -r wm wlo whi < <(perf_median_minmax <"$PERF_TMP/whole.us")
read -r sm slo shi < <(perf_median_minmax <"$PERF_TMP/sliced.us")
echo "whole:  median $wm us CPU per call ($wlo-$whi)"
echo "sliced: median $sm us CPU per call ($slo-$shi)"
awk -v s="$sm" -v w="$wm" 'BEGIN { printf "ratio sliced / whole: %.3f\n", s / w }'
