#!/usr/bin/env bash
# A TLS scan of tollgate's HTTPS listener by a real scanner (Debian's testssl.sh): a server on
# loopback with a throwaway ECDSA P-256 pair (made here, in the temp dir), testssl's protocol,
# cipher category, forward secrecy and vulnerability checks (-p -s -f -U), and a summary:
# the protocols offered, whether every cipher has forward secrecy, and every finding testssl
# rates LOW or worse. Exit 0 when only TLS 1.2/1.3 are offered and no vulnerability is flagged.
#
# Usage: perf/tls/testssl-scan.sh [TOLLGATE_BIN]     (needs: apt install testssl.sh jq)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
BIN=${1:-$(perf_default_tollgate)}
command -v testssl >/dev/null || perf_die "testssl not found (apt install testssl.sh)"
command -v jq >/dev/null || perf_die "jq not found (apt install jq)"
perf_init

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -keyout "$PERF_TMP/key.pem" -out "$PERF_TMP/cert.pem" -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 2>/dev/null
PORT=$(perf_free_port)
TLS_PORT=$(perf_free_port)
perf_start server 0 "$BIN" serve --listen "127.0.0.1:$PORT" --threads 1 --sample \
  --data-dir "$PERF_TMP/data" --tls-listen "127.0.0.1:$TLS_PORT" \
  --tls-cert "$PERF_TMP/cert.pem" --tls-key "$PERF_TMP/key.pem"
perf_wait_http "http://127.0.0.1:$PORT/healthz" 120 || perf_die "the server did not start (see $PERF_TMP/server.log)"
perf_log "testssl against 127.0.0.1:$TLS_PORT (a few minutes)"
testssl --quiet --color 0 --warnings off -p -s -f -U --jsonfile "$PERF_TMP/scan.json" \
  "127.0.0.1:$TLS_PORT" >"$PERF_TMP/scan.txt" 2>&1 || true

J="$PERF_TMP/scan.json"
echo "protocols offered:"
jq -r '.[] | select(.id|test("^(SSLv2|SSLv3|TLS1|TLS1_1|TLS1_2|TLS1_3)$")) | "  \(.id): \(.finding)"' "$J"
echo "forward secrecy:"
jq -r '.[] | select(.id=="FS" or .id=="FS_ciphers" or .id=="FS_ECDHE_curves") | "  \(.id): \(.finding)"' "$J"
echo "findings rated LOW or worse:"
jq -r '.[] | select(.severity|test("LOW|MEDIUM|HIGH|CRITICAL")) | "  \(.severity) \(.id): \(.finding)"' "$J"
bad_proto=$(jq -r '[.[] | select(.id|test("^(SSLv2|SSLv3|TLS1|TLS1_1)$")) | select(.finding|test("not offered")|not)] | length' "$J")
bad_vuln=$(jq -r '[.[] | select(.severity|test("MEDIUM|HIGH|CRITICAL"))] | length' "$J")
if [ "$bad_proto" = 0 ] && [ "$bad_vuln" = 0 ]; then
  echo "ok: only TLS 1.2/1.3 offered, nothing rated MEDIUM or worse"
else
  echo "NOT ok: $bad_proto old protocol(s) offered, $bad_vuln finding(s) MEDIUM or worse"
  exit 1
fi
