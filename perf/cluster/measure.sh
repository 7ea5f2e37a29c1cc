#!/usr/bin/env bash
# perf/cluster/measure.sh: what cluster mode costs next to a single node, on the same load.
#
# Starts a redis-server (its own temp dir, a free port) and two tollgate nodes (--threads 1,
# the embedded sample corpus): `single` (no [cluster]) and `cluster` ([cluster] on that Redis),
# each with one hot key of an unlimited bill plan. Drives each with tools/loadgen (billed MCP
# tools/call search_stories, closed loop, CONNS connections), interleaved over ROUNDS rounds,
# and prints per setup the median req/s, p50/p99 latency and node CPU µs per request (utime +
# stime of the node, /proc/PID/stat), Redis CPU per request, and Redis commands per 1,000
# admitted requests on the hot key (INFO commandstats before/after each cluster run). Then it
# prints the most quota units the cluster node held at once (what kill -9 could strand).
#
# usage: perf/cluster/measure.sh [BUILD_DIR]  (default build/release; needs tollgate, loadgen)
# Environment: ROUNDS (3) DURATION (5) CONNS (16)
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
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
  echo "need redis-server and redis-cli (tools/install-deps.sh)" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-16}
work=$(mktemp -d /tmp/tollgate-cluster-perf.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$rport" --bind 127.0.0.1 --dir "$work" --save "" --appendonly no \
  --loglevel warning > redis.log 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
for _ in $(seq 1 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

cat > plan.toml <<EOT
[quota]
demo_plan = "hot"

[plans.hot]
rate_per_sec = 1000000000
burst = 1000000000
monthly_quota = 1099511627776
overage = "bill"
EOT
{ cat plan.toml; printf '\n[cluster]\nredis = "127.0.0.1:%s"\nnode = "perf-1"\n' "$rport"; } > cluster.toml

start() {
  local name=$1; shift
  "$bin" serve --listen 127.0.0.1:0 --threads 1 --data-dir "$work/$name.d" --sample "$@" \
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

c_key=$("$bin" keys create --account perf --plan hot --config cluster.toml 2>/dev/null)
read -r s_pid s_port < <(start single --config plan.toml)
pids+=("$s_pid")
read -r c_pid c_port < <(start cluster --config cluster.toml)
pids+=("$c_pid")
s_key=$(sed -n 's/^demo key: //p' single.out)

ticks() {
  local sum=0 p
  for p in "$@"; do sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$sum"
}
commands() {  # every command Redis has run so far (INFO commandstats)
  redis-cli -p "$rport" info commandstats | sed -n 's/^cmdstat_[^:]*:calls=\([0-9]*\),.*/\1/p' |
    awk '{s += $1} END {print s + 0}'
}
held_max=0
hz=$(getconf CLK_TCK)
rows=$work/rows
: > "$rows"
for round in $(seq 1 "$ROUNDS"); do
  for setup in single cluster; do
    if [ "$setup" = single ]; then port=$s_port; key=$s_key; pid=$s_pid
    else port=$c_port; key=$c_key; pid=$c_pid; fi
    "$loadgen" -c "$CONNS" -d 1s --warmup 0s --req call --key "$key" \
      "http://127.0.0.1:$port/" > /dev/null 2>&1 || true   # warm-up, not measured
    before=$(ticks "$pid"); rbefore=$(ticks "$redis_pid"); cbefore=$(commands)
    json=$("$loadgen" -c "$CONNS" -d "${DURATION}s" --warmup 0s --req call --key "$key" --json \
      "http://127.0.0.1:$port/")
    after=$(ticks "$pid"); rafter=$(ticks "$redis_pid"); cafter=$(commands)
    if [ "$setup" = cluster ]; then
      h=$(curl -s "http://127.0.0.1:$port/metrics" |
        sed -n 's/^tollgate_cluster_units_held{[^}]*} \([0-9]*\).*/\1/p')
      [ "${h:-0}" -gt "$held_max" ] && held_max=$h
    fi
    echo "$setup $((after - before)) $((rafter - rbefore)) $((cafter - cbefore)) $json" >> "$rows"
  done
done

python3 - "$rows" "$hz" "$ROUNDS" "$DURATION" "$CONNS" "$held_max" <<'PY'
import json, statistics, sys
rows, hz, rounds, duration, conns, held = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
data = {}
for line in open(rows):
    setup, ticks, rticks, cmds, js = line.split(" ", 4)
    d = json.loads(js)
    n = sum(d["outcomes"].values())
    ok = d["outcomes"].get("ok", 0)
    data.setdefault(setup, []).append((d["rps"], d["latency_us"]["p50"], d["latency_us"]["p99"],
        int(ticks) / hz * 1e6 / max(1, n), int(rticks) / hz * 1e6 / max(1, n),
        int(cmds) * 1000 / max(1, ok), n - ok))
print(f"cluster vs single node: {rounds} rounds of {duration}s, {conns} connections, billed "
      f"MCP tools/call on one hot key, --threads 1, medians")
print(f"{'setup':<8} {'req/s':>9} {'p50 us':>8} {'p99 us':>8} {'node CPU us/req':>16} "
      f"{'redis CPU us/req':>17} {'redis cmds/1000':>16} {'not ok':>7}")
for setup in ("single", "cluster"):
    v = data[setup]
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"{setup:<8} {med(0):>9.0f} {med(1):>8.1f} {med(2):>8.1f} {med(3):>16.2f} "
          f"{med(4):>17.2f} {med(5):>16.3f} {sum(x[6] for x in v):>7}")
ratio = statistics.median(x[3] for x in data["cluster"]) / statistics.median(x[3] for x in data["single"])
print(f"node CPU per request, cluster / single: {ratio:.3f}")
print(f"most units the cluster node held at once (a kill -9 strands at most this): {held}")
PY
