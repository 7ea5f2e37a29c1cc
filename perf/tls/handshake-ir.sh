#!/usr/bin/env bash
# perf/tls/handshake-ir.sh: instructions a TLS handshake costs the server, counted by callgrind,
# for two builds side by side (exact where compare-tls.sh's CPU ticks are noisy).
#
# Each binary serves --sample with a TLS 1.3 listener (a fresh ECDSA P-256 pair) under
# `valgrind --tool=callgrind --instr-atstart=no`; once it answers, instrumentation is switched on
# (callgrind_control -i on), perf/tls/tls-client.py runs full (or resumed) handshakes for SECONDS,
# it is switched off, the server stops (callgrind writes its counts at exit), and the server's
# instructions are divided by the handshakes completed.
# Each handshake is connect, handshake, close: no request, so the figure is the TLS layer's.
#
# usage: perf/tls/handshake-ir.sh BASE_BIN NEW_BIN [--resume] [--seconds N]
# Prints one line per binary (Ir per handshake, handshakes, resumed) and the ratio NEW/BASE.
# It stops exactly the processes it started, by PID, at exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
[ $# -ge 2 ] || perf_die "usage: $0 BASE_BIN NEW_BIN [--resume] [--seconds N]"
BASE=$1 NEW=$2
shift 2
RESUME="" SECONDS_RUN=10
while [ $# -gt 0 ]; do
  case $1 in
    --resume) RESUME=--resume ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    *) perf_die "unknown option $1" ;;
  esac
  shift
done
command -v valgrind >/dev/null || perf_die "valgrind is not installed (apt-get install valgrind)"
perf_init
T=$PERF_TMP
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost -keyout "$T/key.pem" -out "$T/cert.pem" 2>/dev/null

one() {  # one NAME BIN: prints "IR HANDSHAKES RESUMED"
  local name=$1 bin=$2 port tls out
  port=$(perf_free_port)
  tls=$(perf_free_port)
  mkdir -p "$T/$name"
  cat >"$T/$name/tollgate.toml" <<TOML
[tls]
listen = "127.0.0.1:$tls"
cert = "$T/cert.pem"
key = "$T/key.pem"
min_version = "1.3"
TOML
  perf_start "$name" 1 valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$T/$name/callgrind.out" "$bin" serve --sample --listen "127.0.0.1:$port" \
    --threads 1 --data-dir "$T/$name/data" --config "$T/$name/tollgate.toml"
  local pid=$PERF_LAST_PID
  perf_wait_http "http://127.0.0.1:$port/healthz" 180 || perf_die "$name did not start"
  callgrind_control -i on "$pid" >/dev/null 2>&1
  out=$(taskset -c 0 python3 "$here/tls-client.py" handshakes 127.0.0.1 "$tls" \
    --cafile "$T/cert.pem" --seconds "$SECONDS_RUN" $RESUME)
  callgrind_control -i off "$pid" >/dev/null 2>&1
  perf_stop "$pid"
  local ir n r
  ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$T/$name/callgrind.out"* | awk '{s += $1} END {print s}')
  n=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"])')
  r=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["resumed"])')
  echo "$ir $n $r"
}

read -r ir_b n_b r_b <<<"$(one base "$BASE")"
read -r ir_n n_n r_n <<<"$(one new "$NEW")"
awk -v ib="$ir_b" -v nb="$n_b" -v rb="$r_b" -v in_="$ir_n" -v nn="$n_n" -v rn="$r_n" 'BEGIN {
  b = ib / nb; n = in_ / nn
  printf "base  %.0f Ir per handshake (%d handshakes, %d resumed)\n", b, nb, rb
  printf "new   %.0f Ir per handshake (%d handshakes, %d resumed)\n", n, nn, rn
  printf "new/base %.4f\n", n / b
}'
