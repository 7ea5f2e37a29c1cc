#!/usr/bin/env bash
# perf/oauth/token-vs-key.sh: the full MCP path (POST /mcp tools/call search_stories) with an
# OAuth access token beside the same call with the API key it stands for (issue 31: a token
# costs at most 1.02x the key's CPU per request). One server (`serve --sample --oauth`, one
# core, pinned to SERVER_CORE), one client (tools/loadgen pinned to CLIENT_CORE, every answer
# checked), interleaved rounds: key, token, key, token, ... Server CPU µs per request is the
# utime+stime delta of the server process over the round divided by the answers.
# With --callgrind it also counts instructions per request exactly (valgrind, as the perf gate
# does): the same server under callgrind, 2,000 calls with each credential after a warm-up.
#
# usage: perf/oauth/token-vs-key.sh [--rounds N] [--duration SECS] [--callgrind]
# Environment: TOLLGATE, LOADGEN (binaries; default build/release), SERVER_CORE (0),
#   CLIENT_CORE (1), CONNECTIONS (16).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"

ROUNDS=5
DURATION=5
CALLGRIND=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --callgrind) CALLGRIND=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) perf_die "unknown option $1" ;;
  esac
done
TOLLGATE=${TOLLGATE:-$(perf_default_tollgate)}
LOADGEN=${LOADGEN:-$PERF_ROOT/build/release/tools/loadgen/loadgen}
SERVER_CORE=${SERVER_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}
CONNECTIONS=${CONNECTIONS:-16}
[ -x "$TOLLGATE" ] || perf_die "no tollgate binary at $TOLLGATE (cmake --build --preset release)"
[ -x "$LOADGEN" ] || perf_die "no loadgen at $LOADGEN (cmake --build --preset release)"
perf_init

# The demo key on a plan no run can exhaust, so every call takes the full path.
cat >"$PERF_TMP/tollgate.toml" <<'TOML'
[quota]
demo_plan = "perf"
[plans.perf]
rate_per_sec = 1000000000
burst = 1000000000
monthly_quota = 1000000000000
overage = "stop"
TOML
port=$(perf_free_port)
perf_start server "$SERVER_CORE" "$TOLLGATE" serve --config "$PERF_TMP/tollgate.toml" --sample \
  --oauth --threads 1 --listen "127.0.0.1:$port" --data-dir "$PERF_TMP/data"
pid=$PERF_LAST_PID
base="http://127.0.0.1:$port"
for _ in $(seq 300); do
  key=$(sed -n 's/^demo key: //p' "$PERF_TMP/server.log")
  [ -n "$key" ] && break
  kill -0 "$pid" 2>/dev/null || { tail -n 20 "$PERF_TMP/server.log" >&2; perf_die "server exited"; }
  sleep 0.1
done
[ -n "$key" ] || perf_die "the server printed no demo key"
perf_wait_mcp server "$pid" "$base/mcp" "$key" || perf_die "the server never answered"
token=$(python3 "$here/get-token.py" "$base" "$key")
perf_log "key ${key:0:12}…, token ${token:0:12}… (through DCR, the consent form and /token)"

# run CREDENTIAL: one round; prints "cpu_us_per_request requests_per_sec".
run() {
  local cred=$1 t0 t1 out n
  t0=$(perf_cpu_ticks "$pid")
  out=$(taskset -c "$CLIENT_CORE" "$LOADGEN" -c "$CONNECTIONS" -d "${DURATION}s" --warmup 0 --req call --query rust \
    --key "$cred" "$base/mcp" 2>&1) || { echo "$out" >&2; perf_die "loadgen failed"; }
  t1=$(perf_cpu_ticks "$pid")
  n=$(awk '$1 == "requests" { print $2; exit }' <<<"$out")
  if [ -z "$n" ] || [ "$n" -eq 0 ]; then
    echo "$out" >&2
    perf_die "no request count in loadgen's output"
  fi
  awk -v d=$((t1 - t0)) -v n="$n" -v hz="$PERF_CLK_TCK" -v s="$DURATION" \
    'BEGIN { printf "%.3f %.0f\n", d / hz * 1e6 / n, n / s }'
}

taskset -c "$CLIENT_CORE" "$LOADGEN" -c "$CONNECTIONS" -d 2s --req call --query rust --key "$key" "$base/mcp" \
  >/dev/null 2>&1 || true  # warm-up
: >"$PERF_TMP/key" && : >"$PERF_TMP/token"
for r in $(seq "$ROUNDS"); do
  run "$key" >>"$PERF_TMP/key"
  run "$token" >>"$PERF_TMP/token"
  perf_log "round $r: key $(tail -n1 "$PERF_TMP/key"), token $(tail -n1 "$PERF_TMP/token")"
done
read -r km kmin kmax < <(cut -d' ' -f1 "$PERF_TMP/key" | perf_median_minmax)
read -r tm tmin tmax < <(cut -d' ' -f1 "$PERF_TMP/token" | perf_median_minmax)
printf 'server CPU per request, µs (median, min-max of %d rounds of %d s)\n' "$ROUNDS" "$DURATION"
printf '  key    %8.2f  (%s-%s)\n' "$km" "$kmin" "$kmax"
printf '  token  %8.2f  (%s-%s)\n' "$tm" "$tmin" "$tmax"
awk -v k="$km" -v t="$tm" 'BEGIN { printf "  token / key: %.3fx (goal <= 1.02x)\n", t / k }'
perf_stop "$pid"

[ "$CALLGRIND" = 1 ] || exit 0
command -v valgrind >/dev/null || perf_die "--callgrind needs valgrind (apt-get install valgrind)"
gate=$PERF_ROOT/perf/gate
port=$(perf_free_port)
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$PERF_TMP/cg.out" \
  --log-file="$PERF_TMP/valgrind.log" "$TOLLGATE" serve --config "$PERF_TMP/tollgate.toml" \
  --sample --oauth --threads 1 \
  --listen "127.0.0.1:$port" --data-dir "$PERF_TMP/data" >"$PERF_TMP/cg-server.log" 2>&1 &
pid=$!
PERF_PIDS+=("$pid")
perf_wait_mcp cg-server "$pid" "http://127.0.0.1:$port/mcp" "$key" || perf_die "no answer under valgrind"
callgrind_control --instr=on "$pid" >/dev/null 2>&1
python3 "$gate/mcp_client.py" "$port" "$key" 200 1 >/dev/null
python3 "$gate/mcp_client.py" "$port" "$token" 200 201 >/dev/null
declare -A ir
for cred in key token; do
  c=$key
  [ "$cred" = token ] && c=$token
  callgrind_control -z "$pid" >/dev/null 2>&1
  python3 "$gate/mcp_client.py" "$port" "$c" 2000 1000 >/dev/null
  callgrind_control --dump="$cred" "$pid" >/dev/null 2>&1
done
callgrind_control --instr=off "$pid" >/dev/null 2>&1
perf_stop "$pid"
n=0
for f in "$PERF_TMP"/cg.out.*; do
  n=$((n + 1))
  cred=key
  [ "$n" = 2 ] && cred=token
  ir[$cred]=$(python3 "$gate/gate.py" dump "$f" 2>/dev/null | sed -n 's/^ir=\([0-9]*\).*/\1/p')
done
printf 'instructions per request (callgrind, 2,000 calls each, idle ticks included)\n'
printf '  key    %10.0f\n  token  %10.0f\n' "$((ir[key] / 2000))" "$((ir[token] / 2000))"
awk -v k="${ir[key]}" -v t="${ir[token]}" 'BEGIN { printf "  token / key: %.4fx\n", t / k }'
