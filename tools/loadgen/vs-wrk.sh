#!/usr/bin/env bash
# tools/loadgen/vs-wrk.sh: client CPU per request of loadgen builds vs wrk, interleaved, against
# one Debian nginx (one process, pinned to SERVER_CORE) answering GET /healthz with 15 bytes and
# every other request with an MCP tools/call answer built from perf/peers/payload.json (1.1 KB).
# Issue 6's aim for loadgen: at most 0.5x wrk's client CPU per request (perf/README.md).
#
#   tools/loadgen/vs-wrk.sh get                       # wrk vs build/loadgen/loadgen, GET /healthz
#   ROUNDS=7 DURATION=5 tools/loadgen/vs-wrk.sh mcp wrk old=/tmp/loadgen.old new=build/loadgen/loadgen \
#     'batched=build/loadgen/loadgen --wait-batch 16 --wait-batch-us 500'
#
# Arguments: MODE (get: GET /healthz, loadgen --req get:/healthz, plain wrk; mcp: POST /mcp,
# loadgen --req call --fixed-id with every response fully checked, wrk perf/wrk/mcp-call.lua),
# then the clients: `wrk` or NAME=LOADGEN_BINARY [FLAGS...] (default: wrk and
# loadgen=build/loadgen/loadgen). Each round runs every client once, in the order given, each
# with 64 connections (CONNECTIONS) for DURATION s on CLIENT_CORE. Client CPU: wrk's user+sys
# (bash `times`), loadgen's own getrusage over its window. Prints per client the median
# (min-max) of µs per request and req/s, the ratio of medians to wrk, each round's ratios, and
# loadgen's TCP segments sent per request. Environment: ROUNDS (5) DURATION (5) CONNECTIONS (64)
# SERVER_CORE (0) CLIENT_CORE (1).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../perf/lib.sh
source "$here/../../perf/lib.sh"

MODE=${1:-get}
shift || true
case "$MODE" in get | mcp) ;; *) perf_die "MODE must be get or mcp (got '$MODE')" ;; esac
CLIENTS=("$@")
[ ${#CLIENTS[@]} -gt 0 ] || CLIENTS=(wrk "loadgen=$PERF_ROOT/build/loadgen/loadgen")
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
SERVER_CORE=${SERVER_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}
for tool in wrk nginx taskset curl perl; do
  command -v "$tool" >/dev/null || perf_die "$tool not found (tools/install-deps.sh --perf)"
done

perf_init
body=$PERF_TMP/body.json
perl -e 'local $/; open my $f, "<", $ARGV[0]; my $p = <$f>; $p =~ s/\s+$//;
         $p =~ s/\\/\\\\/g; $p =~ s/"/\\"/g;
         print "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"$p\"}],\"isError\":false}}"' \
  "$PERF_ROOT/perf/peers/payload.json" >"$body"
prefix=$PERF_TMP/nginx
mkdir -p "$prefix"
for try in 1 2 3; do  # a free port can be taken between the probe and nginx's bind
  port=$(perf_free_port)
  perf_render_nginx "$prefix" "$port" "$body" application/json
  perl -0pi -e 's|    location / \{|    location = /healthz {\n      default_type "application/json";\n      return 200 "{\\"status\\":\\"ok\\"}";\n    }\n    location / {|' \
    "$prefix/nginx.conf"
  perf_start nginx "$SERVER_CORE" nginx -p "$prefix" -c "$prefix/nginx.conf" -e "$prefix/error.log"
  perf_wait_http "http://127.0.0.1:$port/" 10 && break
  [ "$try" -lt 3 ] || perf_die "nginx did not start: $(tail -n 2 "$prefix/error.log")"
done
[ "$(curl -s "http://127.0.0.1:$port/healthz")" = '{"status":"ok"}' ] || perf_die "nginx /healthz"

# Warm nginx up (not recorded).
taskset -c "$CLIENT_CORE" wrk -t1 -c"$CONNECTIONS" -d2s "http://127.0.0.1:$port/healthz" >/dev/null

# json_num FILE KEY: the number after "KEY": (empty when absent, e.g. an older loadgen).
json_num() { { grep -oE "\"$2\":-?[0-9.]+" "$1" || true; } | head -n 1 | cut -d: -f2; }
rows=$PERF_TMP/rows
: >"$rows"
for r in $(seq "$ROUNDS"); do
  for c in "${CLIENTS[@]}"; do
    one=$PERF_TMP/one
    : >"$one"
    segs=nan
    if [ "$c" = wrk ]; then
      name=wrk
      if [ "$MODE" = mcp ]; then
        MCP_PATH=/mcp perf_wrk "$one" "$CLIENT_CORE" -t1 -c"$CONNECTIONS" -d"${DURATION}s" \
          -s "$PERF_ROOT/perf/wrk/mcp-call.lua" "http://127.0.0.1:$port/mcp"
      else
        perf_wrk "$one" "$CLIENT_CORE" -t1 -c"$CONNECTIONS" -d"${DURATION}s" \
          "http://127.0.0.1:$port/healthz"
      fi
      read -r reqs rps _ _ cpu <"$one"
    else
      name=${c%%=*}
      read -r -a cmd <<<"${c#*=}"
      spec=(--req call --fixed-id)
      [ "$MODE" = mcp ] || spec=(--req get:/healthz)
      taskset -c "$CLIENT_CORE" "${cmd[@]}" -c "$CONNECTIONS" -d "${DURATION}s" --warmup 0s --json \
        "${spec[@]}" "http://127.0.0.1:$port/" >"$one" 2>"$one.err" || true
      reqs=$(json_num "$one" responses)
      rps=$(json_num "$one" rps)
      cpu=$(json_num "$one" client_cpu_s)
      segs=$(json_num "$one" tcp_segs_per_req)
      ok=$(json_num "$one" ok)
      [ "${ok:-0}" = "${reqs:-x}" ] || perf_log "  $name: only ${ok:-0} of ${reqs:-0} ok: $(head -c 300 "$one.err")"
    fi
    us=$(awk -v c="${cpu:-0}" -v n="${reqs:-0}" 'BEGIN { printf "%.2f", (n > 0 ? c * 1e6 / n : 0) }')
    echo "$r $name ${rps:-0} $us ${segs:-nan}" >>"$rows"
    perf_log "  round $r $(printf '%-10s' "$name") $(printf '%9.0f' "${rps:-0}") req/s  client $us us/req  load $(cut -d' ' -f1 /proc/loadavg)"
  done
done

names=$(awk '{ print $2 }' "$rows" | awk '!seen[$0]++')
echo "vs-wrk $MODE $(date -u +%Y-%m-%dT%H:%MZ): $ROUNDS rounds x ${DURATION}s, $CONNECTIONS connections," \
  "server core $SERVER_CORE, client core $CLIENT_CORE, load $(cut -d' ' -f1-3 /proc/loadavg)"
wrk_med=$(awk '$2 == "wrk" { print $4 }' "$rows" | perf_median_minmax | cut -d' ' -f1)
for n in $names; do
  read -r m lo hi < <(awk -v n="$n" '$2 == n { print $4 }' "$rows" | perf_median_minmax)
  read -r q qlo qhi < <(awk -v n="$n" '$2 == n { print $3 }' "$rows" | perf_median_minmax)
  s=$(awk -v n="$n" '$2 == n && $5 != "nan" { print $5 }' "$rows" | perf_median_minmax | cut -d' ' -f1)
  awk -v n="$n" -v m="$m" -v lo="$lo" -v hi="$hi" -v q="$q" -v qlo="$qlo" -v qhi="$qhi" \
    -v w="${wrk_med:-nan}" -v s="$s" 'BEGIN {
    printf "  %-10s client %6.2f (%.2f-%.2f) us/req  %8.0f (%.0f-%.0f) req/s", n, m, lo, hi, q, qlo, qhi
    if (w != "nan" && w > 0) printf "  / wrk %.2f", m / w
    if (s != "nan") printf "  TCP segments sent/req %.3f", s
    printf "\n" }'
done
if [ -n "$wrk_med" ] && [ "$wrk_med" != nan ]; then
  printf '  per round (client / wrk):'
  awk '{ v[$1 " " $2] = $4; if (!($2 in seen)) { seen[$2] = 1; order[++k] = $2 } rounds[$1] = 1 }
       END { for (r = 1; r in rounds; r++) { printf " r%d", r
               for (i = 1; i <= k; i++) if (order[i] != "wrk" && v[r " wrk"] > 0)
                 printf " %s %.2f", order[i], v[r " " order[i]] / v[r " wrk"] } print "" }' "$rows"
fi
