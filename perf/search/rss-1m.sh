#!/usr/bin/env bash
# Resident memory of `tollgate serve --corpus F` on its persisted index, two builds side by
# side: VmRSS (and its anonymous / file-mapped parts) after the first answer, then after a query
# run, plus the run's client-side latency of search_stories and get_story.
#
#   perf/search/rss-1m.sh --base OLD/tollgate [--new NEW/tollgate] [--corpus FILE]
#                         [--queries FILE.tsv] [--work DIR] [--sections]
#
# Each build serves a hard link of FILE (default /work/tmp/c1m.jsonl) in WORK/NAME (default
# WORK = /work/tmp/rss-1m), so each maps its own index beside it (`index build` writes it once
# when missing; an index of another format beside it is rebuilt by that build). One key (a
# plan without limits), --threads 1 on core 0, the client on core 1. The query run: every
# query of the TSV file (CLASS<TAB>QUERY, as perf/search/ab-compare writes them; default
# /work/tmp/ab-queries-corpus-1000000-1.jsonl.tsv) as MCP tools/call search_stories (limit 10),
# then get_story of its first hit, over one keep-alive connection. Before each start the index
# file's pages are evicted from the page cache (POSIX_FADV_DONTNEED), so what read the file
# before (a build, the other build's run, a copy) does not decide how the kernel maps it.
# --sections: after each run, what of each section stays mapped (perf/search/mapped-sections).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

base="" new="" corpus=/work/tmp/c1m.jsonl queries=/work/tmp/ab-queries-corpus-1000000-1.jsonl.tsv
work=/work/tmp/rss-1m sections=0
while [ $# -gt 0 ]; do
  case $1 in
    --base) base=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --queries) queries=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --sections) sections=1; shift ;;
    -h|--help) sed -n 2,18p "$0"; exit 0 ;;
    *) perf_die "unknown option $1" ;;
  esac
done
new=${new:-$(perf_default_tollgate)}
[ -x "$base" ] || perf_die "--base TOLLGATE binary is required"
[ -x "$new" ] || perf_die "no tollgate binary at $new"
[ -s "$corpus" ] || perf_die "no corpus at $corpus"
[ -s "$queries" ] || perf_die "no queries at $queries"
perf_init

PLAN_TOML='[plans.big]
rate_per_sec = 100000000
burst = 100000000
monthly_quota = 1000000000000
overage = "bill"
'

# status_mb PID: "VmRSS RssAnon RssFile" in MB
status_mb() {
  awk '/^(VmRSS|RssAnon|RssFile):/ { v[$1] = $2 / 1024 }
    END { printf "%.0f %.0f %.0f", v["VmRSS:"], v["RssAnon:"], v["RssFile:"] }' "/proc/$1/status"
}

# run NAME BIN: prints "NAME rss_load anon file rss_run anon file search_p50 search_p99 get_p50
# get_p99 index_bytes"
run() {
  local name=$1 bin=$2 dir="$work/$1" port key
  mkdir -p "$dir"
  [ -e "$dir/corpus.jsonl" ] || ln "$corpus" "$dir/corpus.jsonl" 2>/dev/null ||
    cp -p "$corpus" "$dir/corpus.jsonl"
  if [ ! -s "$dir/corpus.jsonl.tollgate-index" ]; then
    perf_log "$name: building its index (once)"
    "$bin" index build --corpus "$dir/corpus.jsonl" >&2
  fi
  python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' \
    "$dir/corpus.jsonl.tollgate-index"
  rm -rf "$dir/data"
  mkdir -p "$dir/data"
  printf '%s' "$PLAN_TOML" >"$dir/config.toml"
  key=$("$bin" keys create --account perf --plan big --data-dir "$dir/data" \
    --config "$dir/config.toml" 2>/dev/null | head -1)
  port=$(perf_free_port)
  perf_start "$name" 0 "$bin" serve --config "$dir/config.toml" --data-dir "$dir/data" \
    --listen "127.0.0.1:$port" --threads 1 --corpus "$dir/corpus.jsonl"
  local pid=$PERF_LAST_PID
  perf_wait_mcp "$name" "$pid" "http://127.0.0.1:$port/mcp" "$key" ||
    perf_log "$name: no MCP answer within 600 s"
  grep -q "index: mapped" "$PERF_TMP/$name.log" || perf_log "$name: index not mapped (see its log)"
  grep "index: " "$PERF_TMP/$name.log" | sed "s/^/$name: /" >&2 || true
  local at_load lat
  at_load=$(status_mb "$pid")
  lat=$(taskset -c 1 python3 - "$port" "$key" "$queries" <<'PY'
import http.client, json, sys, time
port, key, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
conn = http.client.HTTPConnection("127.0.0.1", port)
hdr = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
       "Accept": "application/json, text/event-stream"}
def call(name, args):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": name, "arguments": args}})
    t = time.perf_counter()
    conn.request("POST", "/mcp", body, hdr)
    r = conn.getresponse().read()
    return time.perf_counter() - t, json.loads(r)
search, get = [], []
for line in open(path):
    parts = line.rstrip("\n").split("\t")
    if len(parts) < 2:
        continue
    dt, r = call("search_stories", {"query": parts[1], "limit": 10})
    search.append(dt)
    page = json.loads(r["result"]["content"][0]["text"])
    if page["stories"]:
        dt, _ = call("get_story", {"id": page["stories"][0]["id"]})
        get.append(dt)
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] * 1e6 if v else float("nan")
print("%.0f %.0f %.0f %.0f" % (pct(search, .5), pct(search, .99), pct(get, .5), pct(get, .99)))
PY
)
  if [ "$sections" = 1 ]; then
    "$(dirname "$0")/mapped-sections" "$pid" "$dir/corpus.jsonl.tollgate-index" | sed "s/^/$name: /" >&2
  fi
  echo "$name $at_load $(status_mb "$pid") $lat $(stat -c %s "$dir/corpus.jsonl.tollgate-index")"
  perf_stop "$pid"
}

results="$PERF_TMP/results"
run base "$base" >>"$results"
run new "$new" >>"$results"
corpus_mb=$(( $(stat -c %s "$corpus") / 1000000 ))
printf '%-5s %10s %9s %9s %10s %9s %9s %13s %13s %10s %10s %9s\n' build "RSS load MB" anon file \
  "RSS run MB" anon file "search p50 us" "search p99 us" "get p50 us" "get p99 us" "index MB"
awk -v c="$corpus_mb" '{ printf "%-5s %10s %9s %9s %10s %9s %9s %13s %13s %10s %10s %9.0f\n",
  $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 / 1e6; r[NR] = $2; s[NR] = $5 }
  END { printf "corpus %d MB: RSS after load %.2fx (base) -> %.2fx (new) of it; after the run %.2fx -> %.2fx\n",
    c, r[1] / c, r[2] / c, s[1] / c, s[2] / c }' "$results"
