#!/usr/bin/env bash
# The full MCP path over HTTP at a million stories: distinct queries, many keys, nginx beside.
#
#   perf/search/http-1m.sh [--corpus F | --count N] [--duration SECS] [--rounds N]
#                          [--queries Q] [--keys K] [--zipf S] [--connections C]
#                          [--cache-entries E] [--mixed-rate R] [--only bench|mixed]
#                          [--unsliced] [--rt] [--slice P] [--build DIR] [--server-core N] [--client-core N]
#
# Corpus: --corpus F (default /work/tmp/c1m.jsonl when it exists), else `tollgate corpus
# generate --count N --seed 1` (default N = 1000000) cached in /tmp/tollgate-http-1m. The server
# is `tollgate serve --corpus F --threads 1` pinned to SERVER_CORE (default 0), using the
# persisted index beside F (built and written by the first start); loadgen runs on CLIENT_CORE
# (default 1). K API keys (default 1000, `tollgate keys create`, one account each, on a plan
# with no effective limit) are made once per K and cached.
#
# bench: Q distinct queries (default 10000) drawn from titles spread over the corpus, in equal
# shares 1-, 2-, 3-term and 2-word phrases (as perf/search draws them), shuffled (seed 1) into a
# popularity order; loadgen sends MCP tools/call search_stories (limit 10) with query i drawn at
# weight 1/i^S (--zipf, default 1.1) and key j at weight 1/j (closed loop, C connections,
# default 64), answer cache on (E entries per core, default 4096). nginx, pinned to the same
# core, answers the same requests with a fixed real answer (one of the top 200 queries') whose
# body is closest to the mean size of tollgate's answers in the warm-up (WARM_REQUESTS, default
# 50000, or 40 s). Rounds alternate the order of the two. Reported per server:
# req/s, p50/p99, server CPU µs per request (/proc/PID/stat utime+stime deltas over the run),
# bytes per response; and the tollgate / nginx ratios.
#
# mixed: answer cache off (a stream of distinct queries), two open-loop loadgens at once at R
# requests/s in total (default 40): light = 95% (1-term searches from the drawn queries and
# tools/list, 1:1), heavy = 5% (a phrase of three common words, e.g. "of the a"). Each round runs light
# alone, then the same light stream to nginx (one real 1-term answer, on the server core: the
# floor this machine puts under any server's latency at this rate, mostly its wake-up from idle),
# then light + heavy with the shipped search_slice_postings (--slice P: P), then (--unsliced)
# light + heavy with slices off, each tollgate run on a fresh server that first answers 20,000
# closed-loop light calls (its index is mapped cold). It prints each class's p50/p99
# separately (latency from each request's intended send time), medians over the rounds. --rt
# runs the server and both loadgens at SCHED_FIFO priority 1 (chrt; root), so that on a
# machine shared with other work the figures are the server's and not the scheduler's (the
# server is mostly idle at this rate; the kernel's RT throttling bounds it at 95% of a core).
#
# Each measured run lasts DURATION seconds (default 20, at most 60). Every process it starts is
# stopped by its PID at exit.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"

CORPUS=""
COUNT=1000000
DURATION=20
ROUNDS=3
NQUERIES=10000
NKEYS=1000
ZIPF=1.1
CONNECTIONS=64
CACHE_ENTRIES=4096
MIXED_RATE=40
WARM_REQUESTS=${WARM_REQUESTS:-50000}
ONLY=""
UNSLICED=0
RT=0
SLICE=""
BUILD="$PERF_ROOT/build/release"
SERVER_CORE=${SERVER_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}
while [ $# -gt 0 ]; do
  case "$1" in
    --corpus) CORPUS=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --queries) NQUERIES=$2; shift 2 ;;
    --keys) NKEYS=$2; shift 2 ;;
    --zipf) ZIPF=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --cache-entries) CACHE_ENTRIES=$2; shift 2 ;;
    --mixed-rate) MIXED_RATE=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --unsliced) UNSLICED=1; shift ;;
    --rt) RT=1; shift ;;
    --slice) SLICE=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --server-core) SERVER_CORE=$2; shift 2 ;;
    --client-core) CLIENT_CORE=$2; shift 2 ;;
    -h|--help) sed -n '2,39p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) perf_die "unknown argument $1 (see --help)" ;;
  esac
done
case "$ONLY" in ""|bench|mixed) ;; *) perf_die "--only wants bench or mixed" ;; esac
[[ "$DURATION" =~ ^[0-9]+$ ]] && [ "$DURATION" -ge 1 ] && [ "$DURATION" -le 60 ] ||
  perf_die "--duration wants whole seconds, 1-60"
TG="$BUILD/tollgate"
LG="$BUILD/tools/loadgen/loadgen"
[ -x "$TG" ] && [ -x "$LG" ] ||
  perf_die "build the tollgate and loadgen targets in $BUILD (cmake --build --preset release --target tollgate loadgen)"
for tool in nginx taskset curl perl python3; do
  command -v "$tool" >/dev/null || perf_die "$tool not found (tools/install-deps.sh --perf installs it)"
done
perf_init

CACHE=/tmp/tollgate-http-1m
mkdir -p "$CACHE"
if [ -z "$CORPUS" ]; then
  if [ "$COUNT" = 1000000 ] && [ -s /work/tmp/c1m.jsonl ]; then
    CORPUS=/work/tmp/c1m.jsonl
  else
    CORPUS="$CACHE/corpus-$COUNT-1.jsonl"
    if [ ! -s "$CORPUS" ]; then
      perf_log "generating $COUNT stories into $CORPUS"
      "$TG" corpus generate --count "$COUNT" --seed 1 >"$CORPUS.tmp"
      mv "$CORPUS.tmp" "$CORPUS"
    fi
  fi
fi
[ -s "$CORPUS" ] || perf_die "no corpus at $CORPUS"

# --- queries: Q distinct from titles, in popularity order; light and heavy lists for mixed ---
QDIR="$PERF_TMP/queries"
mkdir -p "$QDIR"
python3 - "$CORPUS" "$NQUERIES" "$QDIR" <<'PY'
import json, os, random, sys
corpus, want, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def tokens(s):  # lower-case alphanumeric runs, as perf/search/fts5-compare draws them
    out, cur = [], []
    for ch in s.lower():
        if ch.isalnum():
            cur.append(ch)
        elif cur:
            out.append("".join(cur)); cur = []
    if cur:
        out.append("".join(cur))
    return out
size = os.path.getsize(corpus)
# titles from lines spread over the file: seek to evenly spaced offsets, take the next line
picks = want * 2
seen, qs, ones = set(), [], []
with open(corpus, "rb") as f:
    for k in range(picks):
        f.seek(size * k // picks)
        if k:
            f.readline()
        line = f.readline()
        if not line:
            continue
        toks = tokens(json.loads(line)["title"])
        if len(toks) < 3 or not all(t.isascii() for t in toks):
            continue
        s = k % (len(toks) - 3) if len(toks) > 3 else 0
        cls = k % 4
        q = [toks[s]] if cls == 0 else toks[s:s + cls + 1] if cls < 3 else None
        q = " ".join(q) if q else '"' + " ".join(toks[s:s + 2]) + '"'
        if cls == 0:
            ones.append(q)
        if q not in seen and len(qs) < want:
            seen.add(q); qs.append(q)
if len(qs) < want:
    sys.exit(f"only {len(qs)} distinct queries drawn (wanted {want})")
random.Random(1).shuffle(qs)
open(os.path.join(out, "zipf.txt"), "w").write("\n".join(qs) + "\n")
open(os.path.join(out, "light.txt"), "w").write("\n".join(sorted(set(ones))) + "\n")
common = ["of", "the", "a", "to", "in", "and", "is", "on", "for", "with"]
# Three common words: a phrase of two of them, alone or beside terms, is searched as its pair
# term (docs/design.md §8); one of three still reads the positions of every doc holding both
# of its pairs.
heavy = ['"%s %s %s"' % (a, b, c) for a in common for b in common for c in common if len({a, b, c}) == 3]
open(os.path.join(out, "heavy.txt"), "w").write("\n".join(heavy) + "\n")
PY
perf_log "queries: $(wc -l <"$QDIR/zipf.txt") distinct (Zipf $ZIPF), $(wc -l <"$QDIR/light.txt") light 1-term, $(wc -l <"$QDIR/heavy.txt") heavy phrases"

# --- keys: made once per count, then copied into each server's data dir ---
PLAN_TOML='[plans.big]
rate_per_sec = 100000000
burst = 100000000
monthly_quota = 1000000000000
overage = "bill"
'
KEYDIR="$CACHE/keys-$NKEYS"
if [ ! -s "$KEYDIR/keys.txt" ] || [ "$(wc -l <"$KEYDIR/keys.txt")" -ne "$NKEYS" ]; then
  perf_log "creating $NKEYS keys in $KEYDIR (once)"
  rm -rf "$KEYDIR.tmp"
  mkdir -p "$KEYDIR.tmp/data"
  printf '%s' "$PLAN_TOML" >"$KEYDIR.tmp/plans.toml"
  for i in $(seq "$NKEYS"); do
    "$TG" keys create --account "perf-$i" --plan big --data-dir "$KEYDIR.tmp/data" \
      --config "$KEYDIR.tmp/plans.toml" 2>/dev/null | head -1 >>"$KEYDIR.tmp/keys.txt"
  done
  rm -rf "$KEYDIR"
  mv "$KEYDIR.tmp" "$KEYDIR"
fi

# start_server NAME CACHE_ENTRIES SLICE: a fresh data dir with the keys; sets SRV_PID, SRV_PORT
start_server() {
  local name=$1 entries=$2 slice=$3 dir="$PERF_TMP/$1" i
  mkdir -p "$dir"
  cp -r "$KEYDIR/data" "$dir/data"
  { printf '%s\n[corpus]\nsearch_cache_entries = %s\n' "$PLAN_TOML" "$entries"
    [ -n "$slice" ] && printf 'search_slice_postings = %s\n' "$slice"; } >"$dir/config.toml"
  SRV_PORT=$(perf_free_port)
  local t0=$SECONDS
  perf_start "$name" "$SERVER_CORE" "${PRIO[@]}" "$TG" serve --config "$dir/config.toml" --data-dir "$dir/data" \
    --listen "127.0.0.1:$SRV_PORT" --threads 1 --corpus "$CORPUS"
  SRV_PID=$PERF_LAST_PID
  local key
  key=$(head -1 "$KEYDIR/keys.txt")
  if perf_wait_mcp "$name" "$SRV_PID" "http://127.0.0.1:$SRV_PORT/mcp" "$key"; then
    perf_log "$name serving after $((SECONDS - t0)) s (pid $SRV_PID, port $SRV_PORT)"
    return 0
  fi
  perf_die "$name did not serve within 600 s (see $PERF_TMP/$name.log)"
}

# cache_counts PORT: "hits misses" of the answer cache from /metrics
cache_counts() {
  curl -s "http://127.0.0.1:$1/metrics" | awk '
    /^tollgate_search_cache_hits_total/ { h += $NF } /^tollgate_search_cache_misses_total/ { m += $NF }
    END { printf "%d %d\n", h, m }'
}

PRIO=()  # mixed --rt: chrt -f 1 before the server and the loadgens

# lg OUT ARGS...: loadgen pinned to the client core, JSON report in OUT
lg() {
  local out=$1
  shift
  taskset -c "$CLIENT_CORE" "${PRIO[@]}" "$LG" --json "$@" >"$out" 2>"$out.err" ||
    { cat "$out.err" >&2; perf_die "loadgen failed ($*)"; }
}

bench() {
  local mix=(--req call --limit 10 --queries "$QDIR/zipf.txt" --query-zipf "$ZIPF"
             --keys "$KEYDIR/keys.txt" --zipf 1 -c "$CONNECTIONS")
  start_server tollgate "$CACHE_ENTRIES" ""
  local tg_pid=$SRV_PID tg_port=$SRV_PORT
  # warm-up: the index's pages (mapped from the file) and the answer cache; until WARM_REQUESTS
  # answers (default 50000) or 40 s
  perf_log "warming up tollgate (${WARM_REQUESTS} requests or 40 s)"
  lg "$PERF_TMP/warm.json" "${mix[@]}" --warmup 0 -n "$WARM_REQUESTS" -d 40s "http://127.0.0.1:$tg_port/mcp"
  # nginx's fixed answer: a real answer (one of the top 200 queries') whose body is closest to
  # the mean body size of the warm-up run's answers
  python3 - "$tg_port" "$(head -1 "$KEYDIR/keys.txt")" "$QDIR/zipf.txt" "$PERF_TMP/warm.json" \
      "$PERF_TMP/answer.json" <<'PY'
import json, socket, sys
port, key, qfile, warm, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
w = json.load(open(warm))
mean_resp = w["bytes_read"] / w["responses"]
heads, bodies = [], []
s = socket.create_connection(("127.0.0.1", port))
buf = b""
for q in open(qfile).read().split("\n")[:200]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "search_stories", "arguments": {"query": q, "limit": 10}}}).encode()
    s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key.encode() +
              b"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream"
              b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    head, buf = buf.split(b"\r\n\r\n", 1)
    n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0])
    while len(buf) < n:
        buf += s.recv(65536)
    heads.append(len(head) + 4); bodies.append(buf[:n]); buf = buf[n:]
target = mean_resp - sum(heads) / len(heads)
best = min(bodies, key=lambda b: abs(len(b) - target))
open(out, "wb").write(best)
print(f"answers in the warm-up: {mean_resp:.0f} B each with the head, body ~{target:.0f} B; "
      f"nginx serves a real one of {len(best)} B", file=sys.stderr)
PY
  local ng_port
  ng_port=$(perf_free_port)
  perf_start_nginx nginx "$SERVER_CORE" "$ng_port" "$PERF_TMP/answer.json" application/json ||
    perf_die "nginx did not start"
  local ng_pid=$PERF_LAST_PID
  local results="$PERF_TMP/bench.results" round s order pid port t0 t1 one
  : >"$results"
  for round in $(seq "$ROUNDS"); do
    order=(tollgate nginx)
    [ $((round % 2)) -eq 0 ] && order=(nginx tollgate)
    for s in "${order[@]}"; do
      if [ "$s" = tollgate ]; then pid=$tg_pid port=$tg_port check=full
      else pid=$ng_pid port=$ng_port check=status; fi
      one="$PERF_TMP/bench.$s.$round.json"
      [ "$s" = tollgate ] && cache_counts "$port" >"$one.cache0"
      t0=$(perf_cpu_ticks "$pid")
      lg "$one" "${mix[@]}" --check "$check" --warmup 0 -d "${DURATION}s" "http://127.0.0.1:$port/mcp"
      t1=$(perf_cpu_ticks "$pid")
      hits=nan
      if [ "$s" = tollgate ]; then
        hits=$(cache_counts "$port" | awk -v b="$(cat "$one.cache0")" '{ split(b, o, " ")
          h = $1 - o[1]; m = $2 - o[2]; printf "%.1f", (h + m > 0) ? 100 * h / (h + m) : 0 }')
      fi
      python3 - "$s" "$round" "$one" $((t1 - t0)) "$PERF_CLK_TCK" "$hits" >>"$results" <<'PY'
import json, sys
s, rnd, f, ticks, hz, hits = sys.argv[1:7]
j = json.load(open(f)); n = j["responses"]; l = j["latency_us"]
print(s, rnd, j["rps"], l["p50"], l["p99"], int(ticks) * 1e6 / int(hz) / n if n else 0,
      j["bytes_read"] / n if n else 0, j["errors"], hits)
PY
      perf_log "  round $round $(tail -n 1 "$results" | awk '{ printf "%-9s %8.0f req/s  p50 %7.0f us  p99 %8.0f us  server %6.2f us/req  %5.0f B/resp  errors %d  cache hits %s%%", $1, $3, $4, $5, $6, $7, $8, $9 }')"
    done
  done
  perf_stop "$ng_pid"
  perf_stop "$tg_pid"
  col() { awk -v s="$1" -v c="$2" '$1 == s { print $c }' "$results" | perf_median_minmax; }
  echo
  echo "bench: MCP tools/call search_stories over HTTP, $(wc -l <"$QDIR/zipf.txt") distinct queries (Zipf $ZIPF), $(wc -l <"$KEYDIR/keys.txt") keys (Zipf 1), answer cache $CACHE_ENTRIES entries, -c $CONNECTIONS closed loop, $ROUNDS x ${DURATION}s; corpus $(basename "$CORPUS"); median (min-max)"
  printf '%-9s' server
  for h in "req/s" "p50 us" "p99 us" "server CPU us/req" "bytes/response" "answer cache hits %"; do
    printf ' %-24s' "$h"
  done
  echo
  for s in tollgate nginx; do
    printf '%-9s' "$s"
    for c in 3 4 5 6 7 9; do
      read -r m lo hi <<<"$(col "$s" "$c")"
      printf ' %-24s' "$(printf '%.6g (%.6g-%.6g)' "$m" "$lo" "$hi")"
    done
    echo
  done
  local a b c d e f
  read -r a _ _ <<<"$(col tollgate 6)"; read -r b _ _ <<<"$(col nginx 6)"
  read -r c _ _ <<<"$(col tollgate 5)"; read -r d _ _ <<<"$(col nginx 5)"
  read -r e _ _ <<<"$(col tollgate 3)"; read -r f _ _ <<<"$(col nginx 3)"
  awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v e="$e" -v f="$f" 'BEGIN {
    printf "tollgate / nginx: server CPU per request %.2fx, p99 %.2fx, req/s %.2fx\n", a / b, c / d, e / f }'
  awk '$8 > 0 { bad = 1 } END { if (bad) print "note: some runs had errors (column 8 of the results)" }' "$results"
}

# light_answer PORT: the body of one 1-term search_stories answer (limit 10) from the server at PORT
light_answer() {
  curl -s "http://127.0.0.1:$1/mcp" -H "Authorization: Bearer $(head -1 "$KEYDIR/keys.txt")" \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -d "$(python3 -c 'import json, sys; print(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
      "params": {"name": "search_stories", "arguments": {"query": sys.argv[1], "limit": 10}}}))' \
      "$(head -1 "$QDIR/light.txt")")"
}

mixed() {
  local heavy_rate light_rate
  heavy_rate=$(awk -v r="$MIXED_RATE" 'BEGIN { printf "%.3f", r * 0.05 }')
  light_rate=$(awk -v r="$MIXED_RATE" 'BEGIN { printf "%.3f", r * 0.95 }')
  local keys=(--keys "$KEYDIR/keys.txt" --zipf 1)
  [ "$RT" = 1 ] && PRIO=(chrt -f 1)
  # alone, then nginx (the floor: the machine's own latency for an open-loop stream at this rate
  # to a mostly idle core), then light + heavy
  local runs=("alone:" "nginx:" "sliced:$SLICE")
  [ "$UNSLICED" = 1 ] && runs+=("unsliced:0")
  local results="$PERF_TMP/mixed.results" r name slice hpid round out t0 t1
  : >"$results"
  for round in $(seq "$ROUNDS"); do
    for r in "${runs[@]}"; do
      name=${r%%:*} slice=${r#*:} out="$PERF_TMP/mixed.$name.$round"
      local check=full
      if [ "$name" = nginx ]; then
        # nginx answers every light request with one real 1-term answer (taken from the first
        # tollgate server), on the server core, at the same priority
        SRV_PORT=$(perf_free_port) check=status
        perf_start_nginx "mixed-nginx-$round" "$SERVER_CORE" "$SRV_PORT" "$PERF_TMP/mixed-answer.json" \
          application/json || perf_die "nginx did not start"
        SRV_PID=$PERF_LAST_PID
        [ "$RT" = 1 ] && chrt -f -p 1 "$SRV_PID"
      else
        start_server "mixed-$name-$round" 0 "$slice"
        # a fresh server maps its index cold: touch the light queries' postings first (20,000
        # draws of the ~2,000 1-term queries reach nearly all of them; a few seconds)
        lg "$out.prewarm.json" -c 4 -n 20000 -d 20s --warmup 0 "${keys[@]}" --req call --limit 10 \
          --queries "$QDIR/light.txt" "http://127.0.0.1:$SRV_PORT/mcp"
        [ -s "$PERF_TMP/mixed-answer.json" ] || light_answer "$SRV_PORT" >"$PERF_TMP/mixed-answer.json"
      fi
      hpid=""
      if [ "$name" != alone ] && [ "$name" != nginx ]; then
        taskset -c "$CLIENT_CORE" "${PRIO[@]}" "$LG" --json -c 16 -R "$heavy_rate" --warmup 5s -d "${DURATION}s" \
          "${keys[@]}" --req call --limit 10 --queries "$QDIR/heavy.txt" --seed 2 \
          "http://127.0.0.1:$SRV_PORT/mcp" >"$out.heavy.json" 2>"$out.heavy.err" &
        hpid=$!
        PERF_PIDS+=("$hpid")
      fi
      t0=$(perf_cpu_ticks "$SRV_PID")
      lg "$out.light.json" -c 64 -R "$light_rate" --warmup 5s -d "${DURATION}s" --check "$check" \
        "${keys[@]}" --req call --req list --limit 10 --queries "$QDIR/light.txt" \
        "http://127.0.0.1:$SRV_PORT/mcp"
      t1=$(perf_cpu_ticks "$SRV_PID")
      if [ -n "$hpid" ]; then
        wait "$hpid" || perf_log "heavy loadgen exited $? ($(cat "$out.heavy.err"))"
      fi
      perf_stop "$SRV_PID"
      python3 - "$name" "$round" "$out" $((t1 - t0)) "$PERF_CLK_TCK" "$DURATION" >>"$results" <<'PY'
import json, os, sys
name, rnd, base = sys.argv[1:4]
ticks, hz, dur = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
def fig(cls):
    p = f"{base}.{cls}.json"
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        return ["nan"] * 5
    j = json.load(open(p)); l = j["latency_us"]
    return [f'{j["rps"]:.1f}', f'{l["p50"]:.0f}', f'{l["p99"]:.0f}', f'{l["max"]:.0f}', str(j["errors"])]
# busy: the server's CPU over the whole loadgen run (warm-up included) / its wall time
print(" ".join([name, rnd] + fig("light") + fig("heavy") + [f"{ticks / hz / (dur + 5) * 100:.0f}"]))
PY
      perf_log "  round $round: $(tail -n 1 "$results")"
    done
  done
  echo
  echo "mixed: one server core, answer cache off, open loop at $MIXED_RATE req/s in total: light $light_rate/s (1-term search_stories + tools/list, 1:1), heavy $heavy_rate/s (phrases of common words)$([ "$RT" = 1 ] && echo ", SCHED_FIFO"); $ROUNDS x ${DURATION}s; latency from intended send times; median (min-max) over rounds"
  local hdr=(run "light req/s" "light p50 us" "light p99 us" "light max us" "heavy req/s" "heavy p50 us" "heavy p99 us" "heavy max us" "server busy %")
  printf '%-9s' "${hdr[0]}"
  for h in "${hdr[@]:1}"; do printf ' %-22s' "$h"; done
  echo
  for r in "${runs[@]}"; do
    name=${r%%:*}
    printf '%-9s' "$name"
    for c in 3 4 5 6 8 9 10 11 13; do
      read -r m lo hi <<<"$(awk -v s="$name" -v c="$c" '$1 == s { print $c }' "$results" | perf_median_minmax)"
      printf ' %-22s' "$(printf '%.6g (%.6g-%.6g)' "$m" "$lo" "$hi")"
    done
    echo
  done
  awk '$7 > 0 || ($12 != "nan" && $12 > 0) { bad = 1 } END { if (bad) print "note: some runs had errors" }' "$results"
}

perf_log "corpus $CORPUS; server core $SERVER_CORE, client core $CLIENT_CORE"
[ "$ONLY" = mixed ] || bench
[ "$ONLY" = bench ] || mixed
