#!/usr/bin/env bash
# CPU per request of the full MCP path (tools/call search_stories over HTTP) with the access
# log off, on (every request), and on with [log] sample = 0.01: the server's utime + stime
# over a fixed number of requests, one server core (pinned to CPU 0), loadgen on CPU 1.
# Rounds alternate the modes so drift on a shared machine hits each alike; prints each
# round's figures and the median ratio to "off".
#
#   perf/ops/access-log-cost.sh [ROUNDS] [REQUESTS]     (defaults: 5 rounds of 200000)
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

ROUNDS=${1:-5}
REQUESTS=${2:-200000}
TOLLGATE=${TOLLGATE:-$(perf_default_tollgate)}
LOADGEN=${LOADGEN:-$PERF_ROOT/build/release/tools/loadgen/loadgen}
[ -x "$TOLLGATE" ] || perf_die "no $TOLLGATE (build the release preset)"
[ -x "$LOADGEN" ] || perf_die "no $LOADGEN"
perf_init

# One run: MODE (off | on | sampled) -> prints ns of server CPU per request.
run_mode() {
  local mode=$1 dir="$PERF_TMP/$1.$RANDOM" port
  mkdir -p "$dir"
  port=$(perf_free_port)
  {
    printf '[plans.free]\nrate_per_sec = 1000000000\nburst = 1000000000\n'
    printf 'monthly_quota = 1099511627776\noverage = "bill"\n'
    case $mode in
      on) printf '[log]\naccess = "%s/access.log"\n' "$dir" ;;
      sampled) printf '[log]\naccess = "%s/access.log"\nsample = 0.01\n' "$dir" ;;
    esac
  } >"$dir/t.toml"
  perf_start "srv-$mode" 0 "$TOLLGATE" serve --config "$dir/t.toml" --threads 1 \
    --listen "127.0.0.1:$port" --data-dir "$dir/data"
  local pid=$PERF_LAST_PID
  perf_wait_http "http://127.0.0.1:$port/healthz" 60
  local key
  key=$(grep -o 'tg_[a-z]*_[0-9a-f]*' "$PERF_TMP/srv-$mode.log" | head -1)
  [ -n "$key" ] || perf_die "no demo key in $PERF_TMP/srv-$mode.log"
  # Warm-up (caches, allocator, the answer cache), then the measured window.
  taskset -c 1 "$LOADGEN" -c 16 -n 20000 -d 60s --warmup 0s --req call --key "$key" \
    "http://127.0.0.1:$port/mcp" >/dev/null 2>&1
  local t0 t1
  t0=$(perf_cpu_ticks "$pid")
  taskset -c 1 "$LOADGEN" -c 16 -n "$REQUESTS" -d 120s --warmup 0s --req call --key "$key" \
    "http://127.0.0.1:$port/mcp" >"$dir/loadgen.txt" 2>&1
  t1=$(perf_cpu_ticks "$pid")
  local done_n
  done_n=$(grep -oE '^ *requests[^0-9]*[0-9]+' "$dir/loadgen.txt" | grep -oE '[0-9]+$' | head -1)
  done_n=${done_n:-$REQUESTS}
  perf_stop "$pid"
  local hz
  hz=$(getconf CLK_TCK)
  echo $(( (t1 - t0) * 1000000000 / hz / done_n ))
}

declare -A per
for r in $(seq "$ROUNDS"); do
  for mode in off on sampled; do
    ns=$(run_mode "$mode")
    per[$mode]+="$ns "
    perf_log "round $r $mode: $ns ns CPU/request"
  done
done
off_med=$(printf '%s\n' ${per[off]} | perf_median_minmax | cut -d' ' -f1)
for mode in off on sampled; do
  read -r med lo hi < <(printf '%s\n' ${per[$mode]} | perf_median_minmax)
  ratio=$(awk -v a="$med" -v b="$off_med" 'BEGIN { printf "%.3f", a / b }')
  printf '%-8s median %6s ns CPU/request (min %s, max %s)  ratio to off %s\n' \
    "$mode" "$med" "$lo" "$hi" "$ratio"
done
