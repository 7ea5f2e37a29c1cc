#!/usr/bin/env bash
# perf/fleet/measure.sh: what a fleet costs next to one node serving the same corpus.
#
# Generates COUNT stories (seed SEED), splits them by line parity into two parts, starts
#   ref      one node serving the whole corpus (--threads 1)
#   gateway  a gateway (local = false, --threads 1) over two shard nodes (one part each,
#            --threads 1)
# on free 127.0.0.1 ports, and drives each with tools/loadgen (REST search, loadgen's built-in
# query list, closed loop) at 1 and at CONNS connections, interleaved over ROUNDS rounds. Prints,
# per setup and connection count, the median of req/s, p50 and p99 latency, and CPU µs per
# request summed over every process of the setup (utime + stime from /proc/PID/stat).
#
# usage: perf/fleet/measure.sh [BUILD_DIR]     (default build/release; needs tollgate, loadgen)
# Environment: COUNT (20000) SEED (3) ROUNDS (3) DURATION (5) CONNS (16) QUERY_MIX (rest)
# It stops exactly the processes it started, by PID.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
bin=$build/tollgate
loadgen=$build/tools/loadgen/loadgen
[ -x "$bin" ] && [ -x "$loadgen" ] || {
  echo "need $bin and $loadgen: cmake --build --preset release --target tollgate loadgen" >&2
  exit 2
}
COUNT=${COUNT:-20000}
SEED=${SEED:-3}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-16}
work=$(mktemp -d /tmp/tollgate-fleet-perf.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do  # not our children (started in subshells): poll, bounded
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$work"
}
trap cleanup EXIT

cd "$work"
"$bin" corpus generate --count "$COUNT" --seed "$SEED" > all.jsonl
awk 'NR % 2 == 0' all.jsonl > p0.jsonl
awk 'NR % 2 == 1' all.jsonl > p1.jsonl
cat > plan.toml <<'EOF'
[quota]
demo_plan = "perf"
[plans.perf]
rate_per_sec = 1000000000.0
burst = 1000000000
monthly_quota = 1099511627776
overage = "bill"
EOF
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
{ cat plan.toml; printf '[fleet]\nrole = "shard"\nsecret = "%s"\n' "$secret"; } > shard.toml

# Starts a node; prints "PID PORT" once it listens (bounded wait). It runs in a subshell (process
# substitution), so the caller records the PID for cleanup.
start() {
  local name=$1; shift
  "$bin" serve --listen 127.0.0.1:0 --threads 1 --data-dir "$work/$name.d" "$@" \
    > "$work/$name.out" 2> "$work/$name.err" &
  local pid=$!
  for _ in $(seq 1 600); do
    local port
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$name.err")
    if [ -n "$port" ]; then echo "$pid $port"; return 0; fi
    kill -0 "$pid" 2>/dev/null || { cat "$work/$name.err" >&2; return 1; }
    sleep 0.1
  done
  echo "$name did not start" >&2
  return 1
}

read -r s0_pid s0_port < <(start s0 --config shard.toml --corpus p0.jsonl)
pids+=("$s0_pid")
read -r s1_pid s1_port < <(start s1 --config shard.toml --corpus p1.jsonl)
pids+=("$s1_pid")
{ cat plan.toml
  printf '[fleet]\nsecret = "%s"\nshards = ["127.0.0.1:%s", "127.0.0.1:%s"]\nlocal = false\n' \
    "$secret" "$s0_port" "$s1_port"; } > gateway.toml
read -r g_pid g_port < <(start gateway --config gateway.toml)
pids+=("$g_pid")
read -r r_pid r_port < <(start ref --config plan.toml --corpus all.jsonl)
pids+=("$r_pid")
g_key=$(sed -n 's/^demo key: //p' gateway.out)
r_key=$(sed -n 's/^demo key: //p' ref.out)

ticks() {  # utime + stime of the given PIDs, in clock ticks
  local sum=0 p
  for p in "$@"; do sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$sum"
}
hz=$(getconf CLK_TCK)

rows=$work/rows
: > "$rows"
for round in $(seq 1 "$ROUNDS"); do
  for c in 1 "$CONNS"; do
    for setup in ref gateway; do
      if [ "$setup" = ref ]; then port=$r_port; key=$r_key; procs=("$r_pid")
      else port=$g_port; key=$g_key; procs=("$g_pid" "$s0_pid" "$s1_pid"); fi
      "$loadgen" -c "$c" -d 1s --warmup 0s --req rest --key "$key" \
        "http://127.0.0.1:$port/" > /dev/null 2>&1 || true   # warm-up, not measured
      before=$(ticks "${procs[@]}")
      json=$("$loadgen" -c "$c" -d "${DURATION}s" --warmup 0s --req rest --key "$key" --json \
        "http://127.0.0.1:$port/")
      after=$(ticks "${procs[@]}")
      echo "$setup $c $((after - before)) $json" >> "$rows"
    done
  done
done

python3 - "$rows" "$hz" "$COUNT" "$ROUNDS" "$DURATION" <<'EOF'
import json, statistics, sys
rows, hz, count, rounds, duration = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
data = {}
for line in open(rows):
    setup, c, ticks, js = line.split(" ", 3)
    d = json.loads(js)
    n = sum(d["outcomes"].values())
    bad = n - d["outcomes"].get("ok", 0)
    cpu_us = int(ticks) / hz * 1e6 / max(1, n)
    data.setdefault((setup, int(c)), []).append((d["rps"], d["latency_us"]["p50"], d["latency_us"]["p99"], cpu_us, bad))
print(f"fleet vs one node: {count} stories, {rounds} rounds of {duration}s, REST search, medians")
print(f"{'setup':<9} {'conns':>5} {'req/s':>9} {'p50 us':>9} {'p99 us':>9} {'CPU us/req':>11} {'not ok':>7}")
for (setup, c), v in sorted(data.items(), key=lambda kv: (kv[0][1], kv[0][0] != "ref")):
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"{setup:<9} {c:>5} {med(0):>9.0f} {med(1):>9.1f} {med(2):>9.1f} {med(3):>11.1f} {sum(x[4] for x in v):>7}")
EOF
