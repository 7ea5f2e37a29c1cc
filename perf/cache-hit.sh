#!/usr/bin/env bash
# perf/cache-hit.sh: the full MCP path's server CPU per request with the search answer cache on
# (every request a hit) beside the same server with it off (every request searched, or taken
# from the core's last job, and rendered), one binary, interleaved rounds in one run (issue 33:
# a hit must cost no more than a miss). Both servers run pinned to SERVER_CORE, loadgen to
# CLIENT_CORE; server user + system CPU from /proc/PID/stat deltas; medians (min-max) and the
# ratio on / off. Instruction counts per request of both paths: perf/gate/run (the
# e2e_mcp_search_* figures) and perf/path-profile.sh --config.
#
# usage: perf/cache-hit.sh [--bin TOLLGATE] [--rounds 5] [--duration 3] [--connections 64]
# Environment: QUERY (default rust), SERVER_CORE (0), CLIENT_CORE (1), LOADGEN.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

BIN="" ROUNDS=5 DURATION=3 CONNECTIONS=64
QUERY=${QUERY:-rust}
SERVER_CORE=${SERVER_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) perf_die "unknown argument $1 (see --help)" ;;
  esac
done
BIN=${BIN:-$(perf_default_tollgate)}
LOADGEN=${LOADGEN:-$(dirname "$BIN")/tools/loadgen/loadgen}
[ -x "$BIN" ] || perf_die "$BIN not built"
[ -x "$LOADGEN" ] || perf_die "$LOADGEN not built"
perf_init

cat >"$PERF_TMP/on.toml" <<'TOML'
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
{ printf '[corpus]\nsearch_cache_entries = 0\n\n'; cat "$PERF_TMP/on.toml"; } >"$PERF_TMP/off.toml"

# The demo key: made by a first start in a template data dir that both servers copy.
port=$(perf_free_port)
perf_start prep "$SERVER_CORE" "$BIN" serve --config "$PERF_TMP/on.toml" --sample --threads 1 \
  --listen "127.0.0.1:$port" --data-dir "$PERF_TMP/template"
perf_wait_http "http://127.0.0.1:$port/healthz" 60 || perf_die "the server did not start"
KEY=""
for _ in $(seq 50); do
  KEY=$(sed -n 's/^demo key: *\([^ ]*\).*/\1/p' "$PERF_TMP/prep.log" | head -n 1)
  [ -z "$KEY" ] || break
  sleep 0.1
done
perf_stop "$PERF_LAST_PID"
[ -n "$KEY" ] || perf_die "no demo key in the server's output"
declare -A PORT PID_OF
for v in on off; do
  PORT[$v]=$(perf_free_port)
  cp -a "$PERF_TMP/template" "$PERF_TMP/data-$v"
  perf_start "$v" "$SERVER_CORE" "$BIN" serve --config "$PERF_TMP/$v.toml" --sample --threads 1 \
    --listen "127.0.0.1:${PORT[$v]}" --data-dir "$PERF_TMP/data-$v"
  PID_OF[$v]=$PERF_LAST_PID
  perf_wait_http "http://127.0.0.1:${PORT[$v]}/healthz" 60 || perf_die "the $v server did not start"
done

stat_ticks() { perf_cpu_ticks "$1"; }
json_num() { grep -oE "\"$2\":-?[0-9.]+" "$1" | head -n 1 | cut -d: -f2; }
run() {  # run VARIANT DURATION -> "us_per_request rps"
  local v=$1 d=$2 c0 c1 n
  c0=$(stat_ticks "${PID_OF[$v]}")
  taskset -c "$CLIENT_CORE" "$LOADGEN" -c "$CONNECTIONS" -d "${d}s" --warmup 0s --json \
    --req call --fixed-id --query "$QUERY" --key "$KEY" "http://127.0.0.1:${PORT[$v]}/mcp" \
    >"$PERF_TMP/lg.json" 2>"$PERF_TMP/lg.err" || true
  c1=$(stat_ticks "${PID_OF[$v]}")
  n=$(json_num "$PERF_TMP/lg.json" responses)
  [ -n "$n" ] && [ "$n" -gt 0 ] && [ "$n" = "$(json_num "$PERF_TMP/lg.json" ok)" ] ||
    perf_die "$v: not every response was a success: $(head -c 400 "$PERF_TMP/lg.json" "$PERF_TMP/lg.err")"
  awk -v t=$((c1 - c0)) -v hz="$PERF_CLK_TCK" -v n="$n" -v d="$d" \
    'BEGIN { printf "%.3f %.0f\n", t / hz * 1e6 / n, n / d }'
}
for v in on off; do run "$v" 2 >/dev/null; done  # warm-up (fills the cache)
: >"$PERF_TMP/rows"
for r in $(seq "$ROUNDS"); do
  order=(on off)
  [ $((r % 2)) -eq 0 ] && order=(off on)
  for v in "${order[@]}"; do
    read -r us rps < <(run "$v" "$DURATION")
    echo "$v $us $rps" >>"$PERF_TMP/rows"
    perf_log "round $r cache $v: server CPU $us us/req, $rps req/s"
  done
done
echo "perf/cache-hit.sh $(date -u +%Y-%m-%dT%H:%MZ): $BIN, query '$QUERY', $ROUNDS rounds of ${DURATION}s, $CONNECTIONS connections, load $(cut -d' ' -f1-3 /proc/loadavg)"
for v in on off; do
  read -r m lo hi < <(awk -v v="$v" '$1 == v { print $2 }' "$PERF_TMP/rows" | perf_median_minmax)
  read -r q _ _ < <(awk -v v="$v" '$1 == v { print $3 }' "$PERF_TMP/rows" | perf_median_minmax)
  printf '  cache %-3s server CPU %.2f us/req (%.2f-%.2f), %.0f req/s\n' "$v" "$m" "$lo" "$hi" "$q"
  eval "med_$v=$m"
done
# shellcheck disable=SC2154
awk -v a="$med_on" -v b="$med_off" 'BEGIN { printf "  hit / miss: %.2fx\n", a / b }'
