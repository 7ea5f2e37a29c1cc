#!/usr/bin/env bash
# perf/path-profile.sh: where the full MCP path's per-request cost goes, next to GET /healthz
# (issue 6: the full path should cost <= 1.3x tollgate's own /healthz). Two parts:
#
#   1. callgrind (exact user-space instruction counts, not disturbed by a noisy machine): the
#      release server under `valgrind --tool=callgrind --instr-atstart=no`, instrumentation on
#      after start-up; per request kind a warm-up, then the counters are zeroed, N requests are
#      sent by tools/loadgen (C connections, every response checked) and the window is dumped.
#      Ir per request = (window Ir - idle Ir/s x window s) / N. Kinds: GET /healthz,
#      tools/call search_stories QUERY (default "rust"), and the same call with a query that
#      matches nothing (zzzqqq: the path without search work, small answer).
#      The top inclusive functions of each window go to OUT_DIR/<kind>.annotate.txt.
#   2. native (wall-clock CPU, the kernel included): the same server binary pinned to
#      SERVER_CORE, loadgen pinned to CLIENT_CORE, interleaved rounds of each kind; server
#      user and system CPU µs per request from /proc/PID/stat deltas, medians (min-max).
#
# usage: perf/path-profile.sh [--build-dir DIR] [--requests N] [--connections C]
#                             [--rounds R] [--duration SECS] [--only callgrind|native]
#                             [--config FILE] [--out-dir DIR]
#   --config FILE  extra TOML appended to the profile's config (e.g. a [cache] table)
# Environment: QUERY (default rust), SERVER_CORE (0), CLIENT_CORE (1), LOADGEN.
# Every process it starts is stopped by its PID at exit; loopback only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

BUILD_DIR=$PERF_ROOT/build/release
REQUESTS=2000
CONNECTIONS=4
ROUNDS=3
DURATION=4
ONLY=""
EXTRA_CONFIG=""
OUT_DIR=""
QUERY=${QUERY:-rust}
SERVER_CORE=${SERVER_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR=$(cd "$2" && pwd); shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --config) EXTRA_CONFIG=$2; shift 2 ;;
    --out-dir) OUT_DIR=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) perf_die "unknown argument $1 (see --help)" ;;
  esac
done
SERVER=$BUILD_DIR/tollgate
LOADGEN=${LOADGEN:-$BUILD_DIR/tools/loadgen/loadgen}
[ -x "$SERVER" ] || perf_die "$SERVER not built"
[ -x "$LOADGEN" ] || perf_die "$LOADGEN not built"
perf_init
[ -n "$OUT_DIR" ] || OUT_DIR=$PERF_ROOT/build/perf/path-profile-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT_DIR"

# A plan that never limits; persist and fsync pushed past the run (time-driven work that
# callgrind's slowdown would otherwise put into the windows), as perf/gate does.
cat >"$PERF_TMP/profile.toml" <<'TOML'
[quota]
demo_plan = "perf"
reconcile_ms = 600000
fsync_ms = 600000

[plans.perf]
rate_per_sec = 1000000000.0
burst = 1000000000
monthly_quota = 1000000000000
overage = "bill"
TOML
[ -z "$EXTRA_CONFIG" ] || cat "$EXTRA_CONFIG" >>"$PERF_TMP/profile.toml"

# The demo key: made by a first native start in a template data dir.
port=$(perf_free_port)
perf_start prep "$SERVER_CORE" "$SERVER" serve --config "$PERF_TMP/profile.toml" --sample \
  --threads 1 --listen "127.0.0.1:$port" --data-dir "$PERF_TMP/template"
perf_wait_http "http://127.0.0.1:$port/healthz" 60 || perf_die "the server did not start"
KEY=""
for _ in $(seq 50); do
  KEY=$(sed -n 's/^demo key: *\([^ ]*\).*/\1/p' "$PERF_TMP/prep.log" | head -n 1)
  [ -z "$KEY" ] || break
  sleep 0.1
done
perf_stop "$PERF_LAST_PID"
[ -n "$KEY" ] || perf_die "no demo key in the server's output"

KINDS=(healthz "mcp-$QUERY" mcp-zzzqqq)
spec_of() {  # spec_of KIND: loadgen's request flags
  case "$1" in
    healthz) echo "--req get:/healthz" ;;
    mcp-*) echo "--req call --fixed-id --query ${1#mcp-} --key $KEY" ;;
  esac
}
run_loadgen() {  # run_loadgen KIND URL OUT [loadgen flags...]
  local kind=$1 url=$2 out=$3
  shift 3
  # shellcheck disable=SC2046
  taskset -c "$CLIENT_CORE" "$LOADGEN" -c "$CONNECTIONS" --warmup 0s --json $(spec_of "$kind") \
    "$@" "$url" >"$out" 2>"$out.err" || true
  grep -q '"transport_errors":0' "$out" 2>/dev/null || true
}
json_num() { grep -oE "\"$2\":-?[0-9.]+" "$1" | head -n 1 | cut -d: -f2; }
check_ok() {  # check_ok FILE KIND: every response a success
  local n ok
  n=$(json_num "$1" responses); ok=$(json_num "$1" ok)
  [ -n "$n" ] && [ "$n" -gt 0 ] && [ "$n" = "$ok" ] ||
    perf_die "$2: not every response was a success: $(cat "$1" "$1.err" | head -c 600)"
}

# ---- 1. callgrind ----------------------------------------------------------------------------
if [ "$ONLY" != native ]; then
  cp -a "$PERF_TMP/template" "$PERF_TMP/cg-data"
  port=$(perf_free_port)
  perf_log "callgrind: server on port $port (start-up uninstrumented; slow under valgrind)"
  taskset -c "$SERVER_CORE" valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$OUT_DIR/cg.out" --log-file="$PERF_TMP/valgrind.log" \
    "$SERVER" serve --config "$PERF_TMP/profile.toml" --sample --threads 1 \
    --listen "127.0.0.1:$port" --data-dir "$PERF_TMP/cg-data" >"$PERF_TMP/cg-server.log" 2>&1 &
  cg_pid=$!
  PERF_PIDS+=("$cg_pid")
  perf_wait_http "http://127.0.0.1:$port/healthz" 600 || perf_die "the server under valgrind did not start"
  callgrind_control --instr=on "$cg_pid" >/dev/null
  url="http://127.0.0.1:$port/"
  callgrind_control -z "$cg_pid" >/dev/null
  t0=$(date +%s.%N); sleep 2
  callgrind_control --dump=idle "$cg_pid" >/dev/null
  t1=$(date +%s.%N)
  idle_rate=$(python3 "$PERF_ROOT/perf/gate/gate.py" dump "$OUT_DIR/cg.out.1" 2>/dev/null |
    sed -n 's/^ir=\([0-9]*\).*/\1/p' | awk -v a="$t0" -v b="$t1" '{ printf "%.0f", $1 / (b - a) }')
  dump=1
  for kind in "${KINDS[@]}"; do
    run_loadgen "$kind" "$url" "$PERF_TMP/warm.json" -n 300 -d 600s
    check_ok "$PERF_TMP/warm.json" "$kind (warm-up)"
    callgrind_control -z "$cg_pid" >/dev/null
    t2=$(date +%s.%N)
    run_loadgen "$kind" "$url" "$PERF_TMP/cg-$kind.json" -n "$REQUESTS" -d 600s
    callgrind_control --dump="$kind" "$cg_pid" >/dev/null
    t3=$(date +%s.%N)
    check_ok "$PERF_TMP/cg-$kind.json" "$kind"
    dump=$((dump + 1))
    n=$(json_num "$PERF_TMP/cg-$kind.json" responses)
    ir=$(python3 "$PERF_ROOT/perf/gate/gate.py" dump "$OUT_DIR/cg.out.$dump" 2>/dev/null |
      sed -n 's/^ir=\([0-9]*\).*/\1/p')
    awk -v k="$kind" -v ir="$ir" -v n="$n" -v idle="$idle_rate" -v a="$t2" -v b="$t3" 'BEGIN {
      printf "%s %.0f %d\n", k, (ir - idle * (b - a)) / n, n }' >>"$PERF_TMP/cg-rows"
    callgrind_annotate --inclusive=yes --threshold=99.5 "$OUT_DIR/cg.out.$dump" \
      >"$OUT_DIR/$kind.annotate.txt" 2>/dev/null || true
  done
  callgrind_control --instr=off "$cg_pid" >/dev/null
  # Under valgrind the main thread may take a while to see SIGTERM (perf/gate/README.md, "The
  # server under callgrind"); the dumps are written already.
  kill -TERM "$cg_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$cg_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$cg_pid" 2>/dev/null || true
  wait "$cg_pid" 2>/dev/null || true
  {
    echo "callgrind, user-space instructions per request ($REQUESTS requests, $CONNECTIONS connections; idle $idle_rate Ir/s subtracted)"
    base=$(awk '$1 == "healthz" { print $2 }' "$PERF_TMP/cg-rows")
    awk -v b="$base" '{ printf "  %-16s %9d Ir/request  %6.2fx healthz\n", $1, $2, $2 / b }' \
      "$PERF_TMP/cg-rows"
    echo "  annotations (inclusive): $OUT_DIR/<kind>.annotate.txt"
  } | tee "$OUT_DIR/callgrind.txt"
fi

# ---- 2. native: user vs system CPU per request ------------------------------------------------
if [ "$ONLY" != callgrind ]; then
  cp -a "$PERF_TMP/template" "$PERF_TMP/native-data"
  port=$(perf_free_port)
  perf_start native "$SERVER_CORE" "$SERVER" serve --config "$PERF_TMP/profile.toml" --sample \
    --threads 1 --listen "127.0.0.1:$port" --data-dir "$PERF_TMP/native-data"
  native_pid=$PERF_LAST_PID
  perf_wait_http "http://127.0.0.1:$port/healthz" 60 || perf_die "the server did not start"
  url="http://127.0.0.1:$port/"
  stat_us() {  # stat_us PID -> "utime stime" in clock ticks
    local s
    s=$(cat "/proc/$1/stat")
    s=${s##*) }
    # shellcheck disable=SC2086
    set -- $s
    echo "${12} ${13}"
  }
  for kind in "${KINDS[@]}"; do  # warm-up
    run_loadgen "$kind" "$url" "$PERF_TMP/nw.json" -c 64 -d 2s
  done
  for r in $(seq "$ROUNDS"); do
    n=${#KINDS[@]}
    for ((k = 0; k < n; k++)); do
      kind=${KINDS[$(((k + r - 1) % n))]}
      read -r u0 s0 < <(stat_us "$native_pid")
      taskset -c "$CLIENT_CORE" "$LOADGEN" -c 64 -d "${DURATION}s" --warmup 0s --json \
        $(spec_of "$kind") "$url" >"$PERF_TMP/n.json" 2>"$PERF_TMP/n.json.err" || true
      read -r u1 s1 < <(stat_us "$native_pid")
      check_ok "$PERF_TMP/n.json" "$kind"
      awk -v k="$kind" -v r="$r" -v n="$(json_num "$PERF_TMP/n.json" responses)" \
          -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$PERF_CLK_TCK" \
          -v rps="$(json_num "$PERF_TMP/n.json" rps)" 'BEGIN {
        printf "%s %d %.0f %.3f %.3f\n", k, r, rps, u * 1e6 / hz / n, s * 1e6 / hz / n }' \
        >>"$PERF_TMP/native-rows"
      perf_log "  round $r $(tail -n 1 "$PERF_TMP/native-rows")"
    done
  done
  perf_stop "$native_pid"
  {
    echo "native, server CPU µs per request (loadgen, 64 connections, ${ROUNDS} rounds of ${DURATION}s, server core $SERVER_CORE, client core $CLIENT_CORE; median (min-max))"
    printf '  %-16s %-24s %-22s %-22s %s\n' kind req/s user system total
    for kind in "${KINDS[@]}"; do
      col() { awk -v k="$kind" -v c="$1" '$1 == k { print $c }' "$PERF_TMP/native-rows" | perf_median_minmax; }
      tot=$(awk -v k="$kind" '$1 == k { print $4 + $5 }' "$PERF_TMP/native-rows" | perf_median_minmax)
      printf '  %-16s %-24s %-22s %-22s %s\n' "$kind" \
        "$(col 3 | awk '{ printf "%.0f (%.0f-%.0f)", $1, $2, $3 }')" \
        "$(col 4 | awk '{ printf "%.2f (%.2f-%.2f)", $1, $2, $3 }')" \
        "$(col 5 | awk '{ printf "%.2f (%.2f-%.2f)", $1, $2, $3 }')" \
        "$(echo "$tot" | awk '{ printf "%.2f (%.2f-%.2f)", $1, $2, $3 }')"
    done
  } | tee "$OUT_DIR/native.txt"
fi
perf_log "written to $OUT_DIR"
