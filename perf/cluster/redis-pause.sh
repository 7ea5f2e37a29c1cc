#!/usr/bin/env bash
# perf/cluster/redis-pause.sh: the longest a request waits while Redis is paused (SIGSTOP), on
# a node under load; builds side by side (issue 28, item 1).
#
# Per build, mode and round: a fresh redis-server (no persistence, free port, temp dir), one
# node (`serve --threads 1 --sample`, [cluster] on that Redis, default settings: one core, so
# every key below shares it) and three keys made with the build's `keys create`:
#   A  stop plan (quota 10^9, never reached; rate never reached), billed MCP tools/call, closed
#      loop, A_CONNS connections: its node's pool holds about two sync intervals of its demand,
#      so during a pause it runs dry within about a second and every later call of A needs units
#      from Redis (the key whose lease keeps running out)
#   B  bill plan, unbilled GET /v1/usage, open loop at B_RATE/s over OPEN_CONNS connections
#      (latency from each request's due time: a stalled core cannot hide behind a waiting client)
#   C  bill plan, billed MCP tools/call, open loop at C_RATE/s over OPEN_CONNS connections (its
#      pool also runs dry; OPEN_CONNS must exceed C_RATE x lease_wait_ms, or the client's own
#      queue adds to C's latency)
# All three loadgens start together (1 s warm-up, then BEFORE + PAUSE + AFTER s measured). In
# mode `pause` Redis gets SIGSTOP BEFORE s into the measured window and SIGCONT PAUSE s later;
# in mode `none` it runs throughout (the control). Per key: responses, outcomes, p50/p99/max
# latency over the window (which holds the whole pause and AFTER s past it), requests still in
# flight at the end. Builds alternate within each round; prints a markdown table of medians
# (and the largest max) over rounds.
#
# usage: perf/cluster/redis-pause.sh [LABEL=BUILD_DIR ...]   (default new=build/release)
#   e.g. perf/cluster/redis-pause.sh base=/work/perfbin-base new=/work/perfbin
# Environment: ROUNDS (2) PAUSE (5) BEFORE (1) AFTER (3) A_CONNS (4) B_RATE (200) C_RATE (200)
#   OPEN_CONNS (32)
#   MODES ("pause none") NODE_CORE (0) LOAD_CORES (1: loadgens and redis-server)
#   RAW (a file to copy the raw rows to)
# Runtime: about ROUNDS x builds x modes x (BEFORE + PAUSE + AFTER + 10) s (~2.5 min by
# default for two builds). Stops exactly the processes it started, by PID (a paused Redis is
# sent SIGCONT first).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-2}
PAUSE=${PAUSE:-5}
BEFORE=${BEFORE:-1}
AFTER=${AFTER:-3}
A_CONNS=${A_CONNS:-4}
B_RATE=${B_RATE:-200}
C_RATE=${C_RATE:-200}
OPEN_CONNS=${OPEN_CONNS:-32}
MODES=${MODES:-pause none}
NODE_CORE=${NODE_CORE:-0}
LOAD_CORES=${LOAD_CORES:-1}
cl_need_redis
cl_builds "$@"
LG=$(cl_loadgen)
cl_init
paused=""
on_exit() {
  [ -n "$paused" ] && kill -CONT "$paused" 2>/dev/null
  cl_cleanup
}
trap on_exit EXIT
rows=$PERF_TMP/rows
: >"$rows"
load_start=$(cl_loadavg)
window=$((BEFORE + PAUSE + AFTER))

metric() {  # metric PORT NAME: the sum of a /metrics counter's samples
  curl -s --max-time 2 "http://127.0.0.1:$1/metrics" |
    awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%d", s }'
}

for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    for b in "${!CL_LABELS[@]}"; do
      label=${CL_LABELS[$b]}; bin=${CL_BINS[$b]}
      perf_log "round $round: $label, $mode (load $(cl_loadavg))"
      name=$label-$mode-$round
      cl_redis_start "redis-$name" "$LOAD_CORES"
      cl_config "$PERF_TMP/$name.toml" "$CL_REDIS_PORT" n1
      ka=$(cl_key_create "$bin" "$PERF_TMP/$name.toml" stopq)
      kb=$(cl_key_create "$bin" "$PERF_TMP/$name.toml" hot)
      kc=$(cl_key_create "$bin" "$PERF_TMP/$name.toml" hot)
      cl_node_start "node-$name" "$NODE_CORE" "$bin" "$PERF_TMP/$name.toml"
      npid=$CL_NODE_PID; port=$CL_NODE_PORT
      cl_wait_keys "node-$name" 3
      url=http://127.0.0.1:$port/
      # Warm-up: the node learns A's demand.
      taskset -c "$LOAD_CORES" "$LG" -c "$A_CONNS" -d 1s --warmup 0s --req call --key "$ka" \
        "$url" >/dev/null 2>&1 || true
      w0=$(metric "$port" tollgate_cluster_lease_waits_total)
      lpids=()
      taskset -c "$LOAD_CORES" "$LG" -c "$A_CONNS" -d "${window}s" --warmup 1s --req call \
        --key "$ka" --json "$url" >"$PERF_TMP/a.json" 2>"$PERF_TMP/a.err" &
      lpids+=($!)
      taskset -c "$LOAD_CORES" "$LG" -c "$OPEN_CONNS" -R "$B_RATE" -d "${window}s" --warmup 1s \
        --req get:/v1/usage -H "Authorization: Bearer $kb" --json "$url" >"$PERF_TMP/b.json" 2>"$PERF_TMP/b.err" &
      lpids+=($!)
      taskset -c "$LOAD_CORES" "$LG" -c "$OPEN_CONNS" -R "$C_RATE" -d "${window}s" --warmup 1s \
        --req call --key "$kc" --json "$url" >"$PERF_TMP/c.json" 2>"$PERF_TMP/c.err" &
      lpids+=($!)
      sleep $((1 + BEFORE))
      if [ "$mode" = pause ]; then
        paused=$CL_REDIS_PID
        kill -STOP "$CL_REDIS_PID"
        sleep "$PAUSE"
        kill -CONT "$CL_REDIS_PID"
        paused=""
      fi
      for p in "${lpids[@]}"; do wait "$p" || true; done
      w1=$(metric "$port" tollgate_cluster_lease_waits_total)
      for k in a b c; do
        [ -s "$PERF_TMP/$k.json" ] || { cat "$PERF_TMP/$k.err" >&2; perf_die "loadgen $k printed nothing"; }
        echo "$label $mode $round $k $((w1 - w0)) $(tr -d '\n' <"$PERF_TMP/$k.json")" >>"$rows"
      done
      cl_stop "$npid"
      cl_stop "$CL_REDIS_PID"
    done
  done
done
load_end=$(cl_loadavg)
[ -n "${RAW:-}" ] && cp "$rows" "$RAW"

python3 - "$rows" "$ROUNDS" "$PAUSE" "$BEFORE" "$AFTER" "$A_CONNS" "$B_RATE" "$C_RATE" "$OPEN_CONNS" \
  "$load_start" "$load_end" "${CL_LABELS[@]}" <<'PY'
import json, statistics, sys
rows, rounds, pause, before, after, aconns, brate, crate, oconns, l0, l1, *labels = sys.argv[1:]
data = {}
for line in open(rows):
    label, mode, rnd, key, waits, js = line.split(" ", 5)
    d = json.loads(js)
    data.setdefault((label, mode, key), []).append((d, int(waits)))
print(f"Redis paused (SIGSTOP) for {pause} s, {before} s into a {int(before) + int(pause) + int(after)} s "
      f"window, one node (`--threads 1`: one core for all keys); `none` = the same without the "
      f"pause. A: stop key, billed tools/call, closed loop x {aconns}; B: another key's "
      f"GET /v1/usage, open loop {brate}/s; C: a bill key's billed tools/call, open loop {crate}/s "
      f"(B and C over {oconns} connections each). "
      f"Medians over {rounds} rounds (max: the largest of any round). Load average {l0} at the "
      f"start, {l1} at the end.\n")
print("| build | Redis | key | requests | outcomes (all rounds) | p50 ms | p99 ms | max ms (median) | max ms (largest) | in flight at end | lease waits (node) |")
print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
med = statistics.median
names = {"a": "A stop, call", "b": "B usage (GET)", "c": "C bill, call"}
for label in labels:
    for mode in ("pause", "none"):
        for key in "abc":
            xs = data.get((label, mode, key))
            if not xs:
                continue
            outs = {}
            for d, _ in xs:
                for k, v in d["outcomes"].items():
                    outs[k] = outs.get(k, 0) + v
            o = ", ".join(f"{k} {v:,}" for k, v in sorted(outs.items(), key=lambda kv: -kv[1]))
            lat = lambda q: med(d["latency_us"][q] / 1e3 for d, _ in xs)
            print(f"| {label} | {'paused' if mode == 'pause' else 'running'} | {names[key]} | "
                  f"{med(d['responses'] for d, _ in xs):,.0f} | {o} | {lat('p50'):.2f} | "
                  f"{lat('p99'):.1f} | {lat('max'):,.1f} | "
                  f"{max(d['latency_us']['max'] for d, _ in xs) / 1e3:,.1f} | "
                  f"{max(d['inflight_at_end'] + d['backlog_at_end'] for d, _ in xs)} | "
                  f"{med(w for _, w in xs):,.0f} |")
PY
