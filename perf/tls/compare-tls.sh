#!/usr/bin/env bash
# perf/tls/compare-tls.sh: tollgate's HTTPS listener beside nginx as a TLS terminator, one run
# (issue 32's performance part).
#
# Both servers get the same ECDSA P-256 self-signed pair (made here with openssl, in the temp
# dir) and TLS 1.3 with TLS_AES_128_GCM_SHA256 only: tollgate by `[tls] min_version = "1.3"`,
# nginx by `ssl_protocols TLSv1.3` + `ssl_conf_command Ciphersuites`, and every client by
# OPENSSL_CONF pointing at a file whose system_default section allows only that suite (wrk,
# Python's ssl and loadgen all load it). nginx is configured as a terminator would be: one
# worker (no master, so its PID is the whole server), keep-alive, session tickets on (OpenSSL's
# default of two tickets per handshake; tollgate issues one), a shared session cache, and
# `return 200` with tollgate's exact response bytes for the MCP call (taken from tollgate with
# curl, as perf/compare does). tollgate serves `--sample` with the demo key and a plan that never
# limits, one thread, plain HTTP and HTTPS in the same process. Both servers are pinned to
# SERVER_CORE, every client to CLIENT_CORE; rounds interleave (the server order alternates).
#
# Per round and server:
#   wrk-https / wrk-http      keep-alive POST /mcp tools/call (perf/wrk/mcp-call.lua), CONNECTIONS
#                             connections: server CPU µs per request (utime+stime deltas of
#                             /proc/PID/stat ÷ responses) and req/s
#   loadgen-https / -http     the same request bytes from tools/loadgen (--fixed-id, every answer
#                             checked), when the binary is there
#   hs-full / hs-resumed      new TLS connections, one at a time in a closed loop: connect,
#                             handshake, close (perf/tls/tls-client.py). Python, not openssl
#                             s_time: s_time never reads after the handshake, so under TLS 1.3 it
#                             never receives a ticket and cannot resume; the script also counts
#                             how many handshakes were resumed, so a "resumed" row that was not
#                             is visible. The client is the limit of the connection rate (one
#                             Python loop on one core), so the figure per server is its CPU per
#                             handshake (ticks ÷ connections) and the handshakes one server core
#                             would complete per second at that cost (10^6 ÷ µs).
# Once per server after the rounds: memory per idle TLS connection (IDLE_CONNS connections,
# each after its handshake and one GET, left idle in keep-alive; VmRSS after minus before ÷ N).
#
# usage: perf/tls/compare-tls.sh [--rounds N] [--duration SECS] [--no-build] [--out FILE]
# Environment: ROUNDS (3) DURATION (5) CONNECTIONS (64) IDLE_CONNS (2000) SERVER_CORE (0)
#   CLIENT_CORE (1) TOLLGATE LOADGEN QUERY (rust) PERF_KEEP_TMP=1
# It stops exactly the processes it started, by PID, at exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/../lib.sh
source "$here/../lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
IDLE_CONNS=${IDLE_CONNS:-2000}
SERVER_CORE=${SERVER_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}
QUERY=${QUERY:-rust}
TOLLGATE=${TOLLGATE:-}
LOADGEN=${LOADGEN:-}
BUILD=1
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) perf_die "unknown argument $1 (see --help)" ;;
  esac
done

# --- 1. what we need -------------------------------------------------------------------------
missing=()
for tool in wrk nginx; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ] && [ "$BUILD" = 1 ]; then
  perf_log "installing from Debian: ${missing[*]} (tools/install-deps.sh --perf)"
  "$PERF_ROOT/tools/install-deps.sh" --perf >&2 || perf_log "install-deps failed"
fi
for tool in wrk nginx taskset curl perl openssl python3; do
  command -v "$tool" >/dev/null || perf_die "$tool not found"
done
if [ "$BUILD" = 1 ]; then
  perf_log "building tollgate and loadgen (release preset)"
  (cd "$PERF_ROOT" && cmake --preset release >/dev/null &&
     cmake --build --preset release -j2 --target tollgate loadgen >&2) ||
    perf_log "the build failed: using what is there"
fi
[ -n "$TOLLGATE" ] || TOLLGATE=$(perf_default_tollgate)
[ -x "$TOLLGATE" ] || perf_die "no tollgate binary at $TOLLGATE (set TOLLGATE)"
[ -n "$LOADGEN" ] || LOADGEN=$PERF_ROOT/build/release/tools/loadgen/loadgen
if [ ! -x "$LOADGEN" ] || ! "$LOADGEN" --help 2>&1 | grep -q -- '--tls'; then
  perf_log "no loadgen with --tls at $LOADGEN: skipping the loadgen rows"
  LOADGEN=""
fi

perf_init
T=$PERF_TMP
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -keyout "$T/key.pem" -out "$T/cert.pem" -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
cat >"$T/openssl-client.cnf" <<'CNF'
openssl_conf = default_conf
[default_conf]
ssl_conf = ssl_sect
[ssl_sect]
system_default = system_default_sect
[system_default_sect]
MinProtocol = TLSv1.3
Ciphersuites = TLS_AES_128_GCM_SHA256
CNF
export OPENSSL_CONF=$T/openssl-client.cnf

mcp_body() {
  printf '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"%s"}}}' "$QUERY"
}
mcp_post() {  # mcp_post URL KEY OUTFILE: one tools/call; prints the HTTP status
  curl -s --cacert "$T/cert.pem" -o "$3" -w '%{http_code}' -X POST "$1" \
    -H "Authorization: Bearer $2" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-06-18' \
    --data-binary "$(mcp_body)" || true
}

# --- 2. servers ------------------------------------------------------------------------------
declare -A PID PLAIN TLS
tg_port=$(perf_free_port)
tg_tls=$(perf_free_port)
cat >"$T/tollgate.toml" <<TOML
[quota]
demo_plan = "perf"

[plans.perf]
rate_per_sec = 1000000000.0
burst = 1000000000
monthly_quota = 1000000000000
overage = "bill"

[tls]
listen = "127.0.0.1:$tg_tls"
cert = "$T/cert.pem"
key = "$T/key.pem"
min_version = "1.3"
TOML
perf_start tollgate "$SERVER_CORE" "$TOLLGATE" serve --sample --listen "127.0.0.1:$tg_port" \
  --threads 1 --data-dir "$T/tollgate-data" --config "$T/tollgate.toml"
perf_wait_http "http://127.0.0.1:$tg_port/healthz" 60 ||
  perf_die "tollgate did not start: $(tail -n 5 "$T/tollgate.log" | tr '\n' ' ')"
PID[tollgate]=$PERF_LAST_PID
PLAIN[tollgate]=http://127.0.0.1:$tg_port
TLS[tollgate]=https://localhost:$tg_tls
KEY=""
for _ in $(seq 20); do
  KEY=$(sed -n 's/^demo key: *\([^ ]*\).*/\1/p' "$T/tollgate.log" | head -n 1)
  [ -z "$KEY" ] || break
  sleep 0.1
done
[ -n "$KEY" ] || perf_die "no demo key in tollgate's output"
body="$T/mcp-response.body"
status=$(mcp_post "${PLAIN[tollgate]}/mcp" "$KEY" "$body")
[ "$status" = 200 ] || perf_die "tollgate's tools/call answered HTTP $status"
status=$(mcp_post "${TLS[tollgate]}/mcp" "$KEY" "$T/tls.body")
cmp -s "$body" "$T/tls.body" ||
  perf_die "tollgate over HTTPS answered HTTP $status with other bytes than over HTTP"

ng_port=$(perf_free_port)
ng_tls=$(perf_free_port)
mkdir -p "$T/nginx"
perf_render_nginx "$T/nginx" "$ng_port" "$body" application/json
# The TLS listener and the terminator's settings, beside the plain listener of the template.
NG_TLS="    listen 127.0.0.1:$ng_tls ssl backlog=4096;
    ssl_certificate $T/cert.pem;
    ssl_certificate_key $T/key.pem;
    ssl_protocols TLSv1.3;
    ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;
    ssl_session_tickets on;
    ssl_session_cache shared:TLS:10m;
    ssl_session_timeout 1d;" \
  perl -0777 -i -pe 's/(    listen 127\.0\.0\.1:\d+ backlog=4096;\n)/$1$ENV{NG_TLS}\n/' \
  "$T/nginx/nginx.conf"
nginx -t -q -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" ||
  perf_die "nginx refused its config"
perf_start nginx "$SERVER_CORE" nginx -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log"
PID[nginx]=$PERF_LAST_PID
PLAIN[nginx]=http://127.0.0.1:$ng_port
TLS[nginx]=https://localhost:$ng_tls
perf_wait_http "${PLAIN[nginx]}/" 10 || perf_die "nginx did not start"
for s in tollgate nginx; do
  curl -s --cacert "$T/cert.pem" -o "$T/$s.check" -X POST "${TLS[$s]}/mcp" --data-binary x || true
  [ "$s" = tollgate ] || cmp -s "$T/$s.check" "$body" ||
    perf_die "nginx over HTTPS does not answer tollgate's bytes"
  # What each server negotiates with a client held to the forced suite.
  neg=$(openssl s_client -connect "127.0.0.1:${TLS[$s]##*:}" -servername localhost \
          -CAfile "$T/cert.pem" </dev/null 2>/dev/null | grep -m 1 -E '^New, ' || true)
  perf_log "$s TLS: $neg"
done

# --- 3. rounds -------------------------------------------------------------------------------
json_num() { grep -oE "\"$2\": ?-?[0-9.]+" "$1" | head -n 1 | sed 's/.*: *//'; }
rows="$T/rows"
: >"$rows"
row() {  # row SERVER KIND ROUND COUNT RATE SERVER_TICKS EXTRA
  awk -v s="$1" -v k="$2" -v r="$3" -v n="$4" -v rate="$5" -v ticks="$6" -v hz="$PERF_CLK_TCK" \
      -v x="$7" 'BEGIN {
    us = n > 0 ? ticks * 1e6 / hz / n : 0
    printf "%s %s %d %d %.1f %.2f %s\n", s, k, r, n, rate, us, x }' >>"$rows"
  perf_log "  round $3 $(tail -n 1 "$rows" | awk '{ printf "%-8s %-14s %8d done %9.1f /s  server %8.2f us each  %s", $1, $2, $4, $5, $6, $7 }')"
}
run_wrk() {  # run_wrk SERVER KIND URL ROUND
  local one="$T/one" t0 t1 reqs rps p50
  : >"$one"
  t0=$(perf_cpu_ticks "${PID[$1]}")
  MCP_KEY=$KEY MCP_QUERY=$QUERY MCP_PATH=/mcp perf_wrk "$one" "$CLIENT_CORE" -t1 \
    -c"$CONNECTIONS" -d"${DURATION}s" -s "$PERF_ROOT/perf/wrk/mcp-call.lua" "$3"
  t1=$(perf_cpu_ticks "${PID[$1]}")
  read -r reqs rps p50 _ _ <"$one"
  row "$1" "$2" "$4" "$reqs" "$rps" $((t1 - t0)) "p50_us=$p50"
}
run_loadgen() {  # run_loadgen SERVER KIND URL ROUND [--tls ...]
  local s=$1 k=$2 url=$3 r=$4 one="$T/one" t0 t1 n ok
  shift 4
  t0=$(perf_cpu_ticks "${PID[$s]}")
  taskset -c "$CLIENT_CORE" "$LOADGEN" -c "$CONNECTIONS" -d "${DURATION}s" --warmup 0s --json \
    --req call --fixed-id --query "$QUERY" --key "$KEY" "$@" "$url/" >"$one" 2>"$one.err" || true
  t1=$(perf_cpu_ticks "${PID[$s]}")
  n=$(json_num "$one" responses); ok=$(json_num "$one" ok)
  row "$s" "$k" "$r" "${n:-0}" "$(json_num "$one" rps)" $((t1 - t0)) "ok=${ok:-0}"
}
run_hs() {  # run_hs SERVER KIND ROUND [--resume]
  local s=$1 k=$2 r=$3 one="$T/one" t0 t1 n
  shift 3
  t0=$(perf_cpu_ticks "${PID[$s]}")
  taskset -c "$CLIENT_CORE" python3 "$here/tls-client.py" handshakes 127.0.0.1 "${TLS[$s]##*:}" \
    --cafile "$T/cert.pem" --seconds "$DURATION" "$@" >"$one" 2>"$one.err" ||
    perf_log "tls-client: $(tail -n 2 "$one.err" | tr '\n' ' ')"
  t1=$(perf_cpu_ticks "${PID[$s]}")
  n=$(json_num "$one" connections)
  row "$s" "$k" "$r" "${n:-0}" "$(awk -v n="${n:-0}" -v t="$(json_num "$one" seconds)" \
    'BEGIN { printf "%.1f", (t > 0 ? n / t : 0) }')" $((t1 - t0)) \
    "resumed=$(json_num "$one" resumed) $(grep -oE '"cipher": "[^"]*"' "$one" | tr -d '" ')"
}

perf_log "compare-tls: $ROUNDS round(s) of ${DURATION}s per row, $CONNECTIONS keep-alive connections, servers on core $SERVER_CORE, clients on core $CLIENT_CORE, load $(cut -d' ' -f1-3 /proc/loadavg)"
for s in tollgate nginx; do  # warm-up, not recorded
  MCP_KEY=$KEY MCP_QUERY=$QUERY taskset -c "$CLIENT_CORE" wrk -t1 -c"$CONNECTIONS" -d2s \
    -s "$PERF_ROOT/perf/wrk/mcp-call.lua" "${TLS[$s]}/mcp" >/dev/null 2>&1 || true
done
for round in $(seq "$ROUNDS"); do
  order=(tollgate nginx)
  [ $((round % 2)) -eq 1 ] || order=(nginx tollgate)
  for s in "${order[@]}"; do
    run_wrk "$s" wrk-https "${TLS[$s]}/mcp" "$round"
    run_wrk "$s" wrk-http "${PLAIN[$s]}/mcp" "$round"
    if [ -n "$LOADGEN" ]; then
      run_loadgen "$s" loadgen-https "${TLS[$s]}" "$round" --tls --cacert "$T/cert.pem"
      run_loadgen "$s" loadgen-http "${PLAIN[$s]}" "$round"
    fi
    run_hs "$s" hs-full "$round"
    run_hs "$s" hs-resumed "$round" --resume
  done
done
declare -A IDLE
for s in tollgate nginx; do
  taskset -c "$CLIENT_CORE" python3 "$here/tls-client.py" idle 127.0.0.1 "${TLS[$s]##*:}" \
    --cafile "$T/cert.pem" --pid "${PID[$s]}" --count "$IDLE_CONNS" --path /healthz \
    >"$T/idle.$s" 2>"$T/idle.$s.err" || true
  IDLE[$s]=$(cat "$T/idle.$s" "$T/idle.$s.err")
  perf_log "  idle $s: ${IDLE[$s]}"
done

# --- 4. summary ------------------------------------------------------------------------------
stat() { awk -v s="$1" -v k="$2" -v c="$3" '$1 == s && $2 == k { print $c }' "$rows" | perf_median_minmax; }
med() { stat "$@" | cut -d' ' -f1; }
kinds=(wrk-https wrk-http)
[ -z "$LOADGEN" ] || kinds+=(loadgen-https loadgen-http)
summary="$T/summary"
{
  echo "perf/tls/compare-tls.sh $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n) ($(nproc) cores, $(uname -r)), commit $(git -C "$PERF_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); $ROUNDS rounds of ${DURATION}s; $CONNECTIONS connections; load at end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "TLS 1.3 TLS_AES_128_GCM_SHA256, ECDSA P-256; median (min-max) over rounds"
  printf '%-8s %-14s %-30s %-30s %s\n' server row "per second" "server CPU us each" "last round"
  for k in "${kinds[@]}" hs-full hs-resumed; do
    for s in tollgate nginx; do
      read -r m lo hi <<<"$(stat "$s" "$k" 5)"; a=$(printf '%.6g (%.6g-%.6g)' "$m" "$lo" "$hi")
      read -r m lo hi <<<"$(stat "$s" "$k" 6)"; b=$(printf '%.4g (%.4g-%.4g)' "$m" "$lo" "$hi")
      printf '%-8s %-14s %-30s %-30s %s\n' "$s" "$k" "$a" "$b" \
        "$(awk -v s="$s" -v k="$k" '$1 == s && $2 == k { print $7, $8 }' "$rows" | tail -n 1)"
    done
  done
  echo
  echo "tollgate / nginx, server CPU per request or handshake (issue 32 aims: <= 1.0 for wrk-https; handshakes per core >= nginx's):"
  for k in "${kinds[@]}" hs-full hs-resumed; do
    awk -v k="$k" -v a="$(med tollgate "$k" 6)" -v b="$(med nginx "$k" 6)" 'BEGIN {
      printf "  %-14s %.2fx  (tollgate %.2f us, nginx %.2f us", k, (b > 0 ? a / b : 0), a, b
      if (k ~ /^hs-/) printf "; per core: %.0f vs %.0f handshakes/s", (a > 0 ? 1e6 / a : 0), (b > 0 ? 1e6 / b : 0)
      print ")" }'
  done
  for k in wrk-https loadgen-https; do
    [[ " ${kinds[*]} " == *" $k "* ]] || continue
    for s in tollgate nginx; do
      awk -v s="$s" -v k="$k" -v a="$(med "$s" "$k" 6)" -v b="$(med "$s" "${k%-https}-http" 6)" \
        'BEGIN { printf "  TLS cost per request, %-8s (%s): %+.2f us (%.2fx plain)\n", s, k, a - b, (b > 0 ? a / b : 0) }'
    done
  done
  echo
  echo "memory per idle TLS connection ($IDLE_CONNS after handshake + one GET /healthz, VmRSS delta / N):"
  for s in tollgate nginx; do echo "  $s: ${IDLE[$s]}"; done
} >"$summary"
echo
cat "$summary"
if [ -z "$OUT" ]; then
  mkdir -p "$PERF_ROOT/build/perf"
  OUT="$PERF_ROOT/build/perf/compare-tls-$(date -u +%Y%m%dT%H%M%SZ).txt"
fi
{
  cat "$summary"
  echo
  echo "# raw rows: server row round count per_second server_cpu_us_each extra"
  cat "$rows"
} >"$OUT"
perf_log "written to $OUT"
