#!/usr/bin/env bash
# perf/healthz-vs-nginx.sh: wrk against `GET /healthz` of tollgate and of Debian's nginx
# answering the same bytes with `return 200` (issue 2: aim tollgate >= 1.2x nginx).
#
# Both servers run one thread pinned to SERVER_CORE; wrk runs pinned to CLIENT_CORE. Rounds
# alternate the order of the servers. Per run it records req/s, p50/p99 (wrk --latency), the
# server's CPU µs per request (utime+stime deltas from /proc/PID/stat) and wrk's own CPU µs per
# request; it prints medians (min-max) and the tollgate/nginx ratios.
#
# usage: perf/healthz-vs-nginx.sh [--rounds N] [--duration SECS] [--connections N]
#                                 [--tollgate BIN] [--server-core N] [--client-core N]
# The same settings as environment variables: ROUNDS DURATION CONNECTIONS TOLLGATE
# SERVER_CORE CLIENT_CORE WRK_THREADS. Without a tollgate binary it measures nginx alone.
# It starts its own servers on free 127.0.0.1 ports and stops exactly those PIDs at exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
WRK_THREADS=${WRK_THREADS:-1}
SERVER_CORE=${SERVER_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}
TOLLGATE=${TOLLGATE:-$(perf_default_tollgate)}

while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --tollgate) TOLLGATE=$2; shift 2 ;;
    --server-core) SERVER_CORE=$2; shift 2 ;;
    --client-core) CLIENT_CORE=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) perf_die "unknown argument $1 (see --help)" ;;
  esac
done

for tool in wrk nginx taskset curl perl; do
  command -v "$tool" >/dev/null || perf_die "$tool not found (tools/install-deps.sh --perf installs it)"
done
perf_init

servers=()
body="$PERF_TMP/healthz.body"
ctype="text/plain"

if [ -x "$TOLLGATE" ]; then
  tg_port=$(perf_free_port)
  perf_start tollgate "$SERVER_CORE" "$TOLLGATE" serve --sample --listen "127.0.0.1:$tg_port" \
    --threads 1 --data-dir "$PERF_TMP/tollgate-data"
  tg_pid=$PERF_LAST_PID
  if perf_wait_http "http://127.0.0.1:$tg_port/healthz" 30; then
    ctype=$(curl -s -o "$body" -w '%{content_type}' "http://127.0.0.1:$tg_port/healthz")
    servers+=(tollgate)
  else
    perf_log "tollgate did not answer on 127.0.0.1:$tg_port; skipping it. Its log:"
    tail -n 20 "$PERF_TMP/tollgate.log" >&2 || true
  fi
else
  perf_log "no tollgate binary at $TOLLGATE (build: cmake --preset release && cmake --build --preset release --target tollgate); measuring nginx alone"
fi
if [ ! -s "$body" ]; then
  printf 'ok\n' >"$body"
fi
[ -n "$ctype" ] || ctype="text/plain"

ng_port=$(perf_free_port)
if perf_start_nginx nginx "$SERVER_CORE" "$ng_port" "$body" "$ctype"; then
  ng_pid=$PERF_LAST_PID
  servers+=(nginx)
else
  perf_log "nginx did not start; skipping it"
fi
[ ${#servers[@]} -gt 0 ] || perf_die "no server to measure"

results="$PERF_TMP/results"
: >"$results"
perf_log "healthz: ${#servers[@]} server(s) (${servers[*]}), $ROUNDS round(s) of ${DURATION}s, $CONNECTIONS connections, server core $SERVER_CORE, wrk core $CLIENT_CORE"
for round in $(seq "$ROUNDS"); do
  order=("${servers[@]}")
  if [ $((round % 2)) -eq 0 ]; then
    order=()
    for ((i = ${#servers[@]} - 1; i >= 0; i--)); do order+=("${servers[$i]}"); done
  fi
  for s in "${order[@]}"; do
    if [ "$s" = tollgate ]; then pid=$tg_pid; port=$tg_port; else pid=$ng_pid; port=$ng_port; fi
    kill -0 "$pid" 2>/dev/null || { perf_log "$s (pid $pid) has exited; skipping"; continue; }
    one="$PERF_TMP/one"
    : >"$one"
    t0=$(perf_cpu_ticks "$pid")
    perf_wrk "$one" "$CLIENT_CORE" -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${DURATION}s" \
      "http://127.0.0.1:$port/healthz"
    t1=$(perf_cpu_ticks "$pid")
    read -r reqs rps p50 p99 ccpu <"$one"
    awk -v s="$s" -v r="$round" -v reqs="$reqs" -v rps="$rps" -v p50="$p50" -v p99="$p99" \
        -v ticks=$((t1 - t0)) -v hz="$PERF_CLK_TCK" -v ccpu="$ccpu" 'BEGIN {
      scpu = reqs > 0 ? ticks * 1e6 / hz / reqs : 0; cc = reqs > 0 ? ccpu * 1e6 / reqs : 0
      printf "%s %d %.1f %.1f %.1f %.2f %.2f\n", s, r, rps, p50, p99, scpu, cc }' >>"$results"
    perf_log "  round $round $(tail -n 1 "$results" | awk '{ printf "%-9s %9.0f req/s  p50 %7.1f us  p99 %8.1f us  server %6.2f us/req  wrk %6.2f us/req", $1, $3, $4, $5, $6, $7 }')"
  done
done

col() { awk -v s="$1" -v c="$2" '$1 == s { print $c }' "$results" | perf_median_minmax; }
echo
echo "GET /healthz, wrk -t$WRK_THREADS -c$CONNECTIONS -d${DURATION}s, $ROUNDS interleaved rounds; median (min-max)"
printf '%-10s' server
for h in "req/s" "p50 us" "p99 us" "server CPU us/req" "wrk CPU us/req"; do printf ' %-26s' "$h"; done
echo
for s in "${servers[@]}"; do
  printf '%-10s' "$s"
  for c in 3 4 5 6 7; do
    read -r m lo hi <<<"$(col "$s" "$c")"
    printf ' %-26s' "$(printf '%.6g (%.6g-%.6g)' "$m" "$lo" "$hi")"
  done
  echo
done
if [[ " ${servers[*]} " == *" tollgate "* && " ${servers[*]} " == *" nginx "* ]]; then
  read -r tg_rps _ _ <<<"$(col tollgate 3)"
  read -r ng_rps _ _ <<<"$(col nginx 3)"
  read -r tg_cpu _ _ <<<"$(col tollgate 6)"
  read -r ng_cpu _ _ <<<"$(col nginx 6)"
  awk -v a="$tg_rps" -v b="$ng_rps" -v c="$tg_cpu" -v d="$ng_cpu" 'BEGIN {
    printf "tollgate / nginx: req/s %.2fx (aim >= 1.2x), server CPU per request %.2fx\n", a / b, c / d }'
fi
