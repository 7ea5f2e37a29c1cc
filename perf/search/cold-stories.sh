#!/usr/bin/env bash
# Light MCP calls on a core whose get_story reads texts the page cache does not hold: two
# binaries side by side (the one that reads them on the core with pread, and the one that
# parks the request while the core's ring reads them).
#
#   perf/search/cold-stories.sh --base OLD/tollgate [--new build/release/tollgate]
#       [--count 200000] [--seed 1] [--duration 10s] [--rate 1000] [--rounds 3]
#       [--cold-pause-ms 0] [--loadgen build/release/tools/loadgen/loadgen]
#
# Serves `tollgate corpus generate --count N --seed S` on one core (core 0, answer cache off)
# from its persisted index (built once, before the first round). On core 1, at once: a loadgen
# sending light calls open loop at R/s (tools/list and a search_stories of a word in no story,
# 4 connections; latency from the intended send times), and a client that, in a closed loop,
# drops the index and corpus files' pages from the page cache (POSIX_FADV_DONTNEED: the pages
# the server maps stay) and asks GET /v1/stories/{id} of a random story (then sleeps
# --cold-pause-ms: 0 is a stream of cold stories as fast as they answer). Base and new
# alternate, in swapped order each round. Prints per side the light calls' p50/p99/p99.9, and
# the cold stories' count and median latency; then the medians over rounds and new/base.
# Every process it starts is stopped by its PID.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

BASE=""
NEW=$(perf_default_tollgate)
COUNT=200000
SEED=1
DURATION=10s
RATE=1000
ROUNDS=3
PAUSE_MS=0
LG="$PERF_ROOT/build/release/tools/loadgen/loadgen"
while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE=$2; shift 2 ;;
    --new) NEW=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --cold-pause-ms) PAUSE_MS=$2; shift 2 ;;
    --loadgen) LG=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) perf_die "unknown argument $1" ;;
  esac
done
[ -n "$BASE" ] || perf_die "--base BINARY is required"
[ -x "$BASE" ] && [ -x "$NEW" ] || perf_die "--base and --new must be tollgate binaries"
[ -x "$LG" ] || perf_die "build the loadgen target (or give --loadgen)"
perf_init

CORPUS=$(perf_corpus "$NEW" "$COUNT" "$SEED" /tmp/tollgate-cold-stories)
SECS=${DURATION%s}
# The ids the cold client draws from: every 37th story's.
IDS="$PERF_TMP/ids.txt"
python3 - "$CORPUS" "$IDS" <<'PY'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for i, line in enumerate(f):
        if i % 37 == 0:
            out.write(json.loads(line)["id"] + "\n")
PY

run() {  # run SIDE BINARY ROUND
  local side=$1 tg=$2 round=$3 dir port key server
  dir="$PERF_TMP/$side-$round"
  mkdir -p "$dir/data"
  cat >"$dir/config.toml" <<TOML
[plans.big]
rate_per_sec = 100000000
burst = 100000000
monthly_quota = 1000000000000
overage = "bill"

[corpus]
search_cache_entries = 0
TOML
  key=$("$tg" keys create --account perf --plan big --data-dir "$dir/data" --config "$dir/config.toml" | head -1)
  port=$(perf_free_port)
  perf_start "$side-$round-server" 0 "$tg" serve --config "$dir/config.toml" \
    --data-dir "$dir/data" --listen "127.0.0.1:$port" --threads 1 --corpus "$CORPUS"
  server=$PERF_LAST_PID
  perf_wait_mcp "$side-$round-server" "$server" "http://127.0.0.1:$port/mcp" "$key" ||
    perf_die "server did not start (see $PERF_TMP/$side-$round-server.log)"
  taskset -c 1 python3 - "$port" "$key" "$CORPUS" "$IDS" "$SECS" "$PAUSE_MS" >"$dir/cold.txt" <<'PY' &
import http.client, os, random, sys, time
port, key, corpus, ids_path, secs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
pause = float(sys.argv[6]) / 1000
ids = open(ids_path).read().split()
files = [corpus, corpus + ".tollgate-index"]
rng = random.Random(7)
conn = http.client.HTTPConnection("127.0.0.1", int(port))
lat = []
time.sleep(1.0)  # the loadgen's warmup
end = time.monotonic() + secs
while time.monotonic() < end:
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    t0 = time.perf_counter()
    conn.request("GET", "/v1/stories/" + rng.choice(ids), headers={"X-API-Key": key})
    r = conn.getresponse()
    r.read()
    lat.append((time.perf_counter() - t0) * 1e6)
    if r.status != 200:
        sys.exit(f"story answered {r.status}")
    if pause > 0:
        time.sleep(pause)
lat.sort()
print(len(lat), lat[len(lat) // 2])
PY
  local cpid=$!
  PERF_PIDS+=("$cpid")
  taskset -c 1 "$LG" -c 4 -R "$RATE" --warmup 1s -d "$DURATION" --key "$key" --req call --req list \
    --query xyzzyplughnothing --json "http://127.0.0.1:$port/mcp" >"$dir/light.json" 2>"$dir/light.err"
  wait "$cpid" || perf_die "the cold client failed ($side round $round)"
  perf_stop "$server"
  python3 - "$side" "$dir" <<'PY' | tee -a "$PERF_TMP/results"
import json, sys
side, d = sys.argv[1], sys.argv[2]
l = json.load(open(d + "/light.json"))["latency_us"]
n, med = open(d + "/cold.txt").read().split()
print(f"{side} {l['p50']:.0f} {l['p99']:.0f} {l.get('p99.9', l.get('p999', 0)):.0f} {n} {float(med):.0f}")
PY
}

echo "corpus: $COUNT stories (seed $SEED); server on core 0; light calls at $RATE/s and the cold client (pause $PAUSE_MS ms) on core 1; $ROUNDS x $DURATION"
echo "side light_p50_us light_p99_us light_p99.9_us cold_stories cold_story_p50_us"
# The index, built once before the rounds (each side's first start would otherwise build it).
"$NEW" index build --corpus "$CORPUS" >/dev/null 2>&1 || true
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then
    run base "$BASE" "$round"; run new "$NEW" "$round"
  else
    run new "$NEW" "$round"; run base "$BASE" "$round"
  fi
done
python3 - "$PERF_TMP/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(side, col):
    return statistics.median(float(r[col]) for r in rows if r[0] == side)
names = ["light p50 us", "light p99 us", "light p99.9 us", "cold stories", "cold story p50 us"]
print("medians over rounds:")
for i, n in enumerate(names, 1):
    b, v = med("base", i), med("new", i)
    print(f"  {n:18s} base {b:9.0f}  new {v:9.0f}  new/base {v / b if b else float('nan'):.2f}")
PY
