#!/usr/bin/env bash
# perf/cluster/idle-keys.sh: what idle keys cost Redis, three nodes and no traffic, by the
# number of keys; builds side by side (issue 28, item 4).
#
# Per build, key count N (COUNTS) and round: a fresh redis-server (no persistence, free port,
# temp dir), one key made with the build's `keys create` (so the key set has its epoch where the
# build has one) and N - 1 more written straight into Redis with redis-cli --pipe (hash
# P{keys}:keys, "SHA256HEX perf hot CREATED active"; P{keys}:accounts; INCR P{keys}:version),
# then three nodes (`serve --threads 1 --sample`, [cluster] nodes n1-n3) that load them. Once
# all are ready, it waits until Redis runs fewer than IDLE_BELOW commands/s (2 s in a row; a
# starting node pushes every key once) or SETTLE_MAX s have passed, and reports that time from
# the nodes' start and the commands Redis ran until then (the start-up wave). After SETTLE s
# more, QUIET s without any request: Redis commands per second as INFO commandstats counts
# them (calls inside scripts included), scripts (EVALSHA) per second, redis-server's CPU and
# the three nodes' CPU (utime + stime, /proc) as a share of one core. Builds alternate within
# each round; prints a markdown table of medians over rounds.
#
# usage: perf/cluster/idle-keys.sh [LABEL=BUILD_DIR ...]   (default new=build/release)
#   e.g. perf/cluster/idle-keys.sh base=/work/perfbin-base new=/work/perfbin
# Environment: ROUNDS (2) COUNTS ("1000 100000") SETTLE_MAX (60) IDLE_BELOW (100) SETTLE (3)
#   QUIET (10) CORES (0-1)
#   RAW (a file to copy the raw rows to)
# Runtime: about ROUNDS x builds x counts x (start + settling + SETTLE + QUIET + 5) s; a build
# whose idle keys never stop costing waits SETTLE_MAX each time (~7 min by default for two
# builds, one of them the build before issue 28).
# Stops exactly the processes it started, by PID.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-2}
COUNTS=${COUNTS:-1000 100000}
SETTLE=${SETTLE:-3}
SETTLE_MAX=${SETTLE_MAX:-60}
IDLE_BELOW=${IDLE_BELOW:-100}
QUIET=${QUIET:-10}
CORES=${CORES:-0-1}
cl_need_redis
cl_builds "$@"
cl_init
rows=$PERF_TMP/rows
: >"$rows"
load_start=$(cl_loadavg)

for round in $(seq "$ROUNDS"); do
  for n in $COUNTS; do
    for b in "${!CL_LABELS[@]}"; do
      label=${CL_LABELS[$b]}; bin=${CL_BINS[$b]}
      perf_log "round $round: $label, $n keys (load $(cl_loadavg))"
      cl_redis_start "redis-$label-$n-$round" "$CORES"
      for i in 1 2 3; do cl_config "$PERF_TMP/n$i.toml" "$CL_REDIS_PORT" "n$i"; done
      cl_key_create "$bin" "$PERF_TMP/n1.toml" hot >/dev/null
      [ "$n" -gt 1 ] && cl_put_keys "$CL_REDIS_PORT" $((n - 1)) hot "$PERF_TMP/idle-keys.txt"
      npids=(); ports=()
      w0=$(cl_commands "$CL_REDIS_PORT")
      t_start=$(cl_now)
      for i in 1 2 3; do
        cl_node_spawn "n$i-$label-$n-$round" "$CORES" "$bin" "$PERF_TMP/n$i.toml"
        npids+=("$CL_NODE_PID"); ports+=("$CL_NODE_PORT")
      done
      for i in 0 1 2; do cl_node_ready "n$((i + 1))-$label-$n-$round" "${npids[$i]}" "${ports[$i]}"; done
      for i in 1 2 3; do cl_wait_keys "n$i-$label-$n-$round" "$n"; done
      t_ready=$(cl_now)
      # Settle: until Redis ran fewer than IDLE_BELOW commands/s over 2 s (a starting node pushes
      # each key once), or SETTLE_MAX s; the commands from the nodes' start to then are the
      # start-up wave.
      prev=$(cl_commands "$CL_REDIS_PORT"); low=0; waited=0
      while [ "$waited" -lt "$SETTLE_MAX" ]; do
        sleep 1; waited=$((waited + 1))
        c=$(cl_commands "$CL_REDIS_PORT")
        if [ $((c - prev)) -lt "$IDLE_BELOW" ]; then low=$((low + 1)); else low=0; fi
        prev=$c
        [ "$low" -ge 2 ] && break
      done
      t_settled=$(cl_now)
      wave=$(($(cl_commands "$CL_REDIS_PORT") - w0))
      sleep "$SETTLE"
      c0=$(cl_commands "$CL_REDIS_PORT")
      e0=$(cl_cmdstats "$CL_REDIS_PORT" | awk '$1 == "evalsha" { print $2 }')
      r0=$(perf_cpu_ticks "$CL_REDIS_PID"); s0=0
      for p in "${npids[@]}"; do s0=$((s0 + $(perf_cpu_ticks "$p"))); done
      t0=$(cl_now)
      sleep "$QUIET"
      t1=$(cl_now)
      c1=$(cl_commands "$CL_REDIS_PORT")
      e1=$(cl_cmdstats "$CL_REDIS_PORT" | awk '$1 == "evalsha" { print $2 }')
      r1=$(perf_cpu_ticks "$CL_REDIS_PID"); s1=0
      for p in "${npids[@]}"; do s1=$((s1 + $(perf_cpu_ticks "$p"))); done
      echo "$label $n $round $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') \
$((c1 - c0)) $((${e1:-0} - ${e0:-0})) $((r1 - r0)) $((s1 - s0)) \
$(awk -v a="$t_start" -v b="$t_ready" 'BEGIN { printf "%.1f", b - a }') \
$(awk -v a="$t_start" -v b="$t_settled" -v l="$low" 'BEGIN { printf "%.1f%s", b - a, (l >= 2 ? "" : "+") }') \
$wave" >>"$rows"
      [ -n "${VERBOSE:-}" ] && cl_cmdstats "$CL_REDIS_PORT" >&2
      cl_stop_all "${npids[@]}"
      cl_stop "$CL_REDIS_PID"
    done
  done
done
load_end=$(cl_loadavg)
[ -n "${RAW:-}" ] && cp "$rows" "$RAW"

python3 - "$rows" "$PERF_CLK_TCK" "$ROUNDS" "$QUIET" "$load_start" "$load_end" "$IDLE_BELOW" \
  "$SETTLE_MAX" "${CL_LABELS[@]}" <<'PY'
import statistics, sys
rows, hz, rounds, quiet, l0, l1, idle_below, settle_max, *labels = sys.argv[1:]
hz = int(hz)
data = {}
for line in open(rows):
    label, n, rnd, secs, cmds, evals, rt, nt, ready, settled, wave = line.split()
    secs = float(secs)
    data.setdefault((label, int(n)), []).append(dict(
        cmds=int(cmds) / secs, evals=int(evals) / secs, redis=int(rt) / hz / secs * 100,
        nodes=int(nt) / hz / secs * 100, ready=float(ready), settled=settled,
        never=settled.endswith("+"), wave=int(wave)))
med = lambda k, xs: statistics.median(x[k] for x in xs)
rng = lambda k, xs, f: f"{f.format(med(k, xs))} ({f.format(min(x[k] for x in xs))}-{f.format(max(x[k] for x in xs))})"
print(f"Idle keys, three nodes (`--threads 1`), no requests: Redis's own count (INFO commandstats, "
      f"script calls included) over {quiet} s once settled, medians (min-max) of {rounds} rounds; "
      f"the start-up columns count from the nodes' start (times per round; '+': still above "
      f"{idle_below}/s when the wait ended). "
      f"Load average {l0} at the start, {l1} at the end.\n")
print("| build | keys | Redis commands/s | scripts (EVALSHA)/s | redis-server CPU | 3 nodes' CPU | start to all keys loaded | start to < " + idle_below + " commands/s | Redis commands until then |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for label in labels:
    for n in sorted({n for (l, n) in data if l == label}):
        xs = data[(label, n)]
        print(f"| {label} | {n:,} | {rng('cmds', xs, '{:,.1f}')} | {med('evals', xs):,.1f} | "
              f"{med('redis', xs):.1f}% | {med('nodes', xs):.1f}% | {med('ready', xs):.1f} s | "
              + ("never (" + settle_max + " s)" if all(x["never"] for x in xs) else
                 ", ".join(x["settled"] + " s" for x in xs)) + f" | {med('wave', xs):,.0f} |")
PY
