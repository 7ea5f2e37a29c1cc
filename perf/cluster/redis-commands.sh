#!/usr/bin/env bash
# perf/cluster/redis-commands.sh: Redis commands per 1,000 requests as Redis counts them
# (INFO commandstats: the calls a script makes are counted too), three nodes, one hot key and
# KEYS keys drawn Zipf(ZIPF); builds side by side (issue 28, item 5).
#
# Per build and round: a fresh redis-server (no persistence, free port, temp dir), one hot key
# made with the build's `keys create` and KEYS more written straight into Redis (hash
# P{keys}:keys, all on an unlimited bill plan), three nodes (`serve --threads 1 --sample`,
# [cluster] nodes n1-n3) that load all KEYS + 1 keys. Then, each phase counted by Redis:
#   quiet        QUIET s with no traffic: the background (key-version polls, heartbeats, and
#                whatever the nodes run for idle keys), commands per second
#   hot          three loadgens at once, one per node, CONNS connections each, billed MCP
#                tools/call on the hot key for DURATION s (after 1 s of warm-up)
#   zipf         the same over the KEYS keys, key i drawn with weight 1/i^ZIPF
#   quiet after  QUIET s with no traffic again, AFTER s after the load stopped (a key's demand
#                figure halves every sync interval, so a key that was busy is idle again some
#                seconds later)
# A load phase is reported as commands per 1,000 requests (every response counted; all are
# expected ok), and "net": the same less the quiet phase's rate over the phase's time, i.e.
# what the traffic itself cost. "nodes' count" is the nodes' own figure
# (tollgate_cluster_redis_commands_total), for comparison with Redis's.
# Builds alternate within each round. Prints a markdown table of medians over rounds.
#
# usage: perf/cluster/redis-commands.sh [LABEL=BUILD_DIR ...]   (default new=build/release)
#   e.g. perf/cluster/redis-commands.sh base=/work/perfbin-base new=/work/perfbin
#   BUILD_DIR holds tollgate (and tools/loadgen/loadgen, or set LOADGEN).
# Environment: ROUNDS (3) DURATION (5) QUIET (5) SETTLE (3) AFTER (10) CONNS (8) KEYS (1000)
#   ZIPF (1.1) RAW (a file to copy the raw rows to) VERBOSE (print each round's commandstats)
#   CORES (0-1: where Redis, nodes and loadgens may run)
# Runtime: about ROUNDS x builds x (2 x DURATION + 2 x QUIET + 2 x SETTLE + AFTER + 15) s
# (~5 min by default for two builds). Stops exactly the processes it started, by PID.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
QUIET=${QUIET:-5}
SETTLE=${SETTLE:-3}
AFTER=${AFTER:-10}
CONNS=${CONNS:-8}
KEYS=${KEYS:-1000}
ZIPF=${ZIPF:-1.1}
CORES=${CORES:-0-1}
cl_need_redis
cl_builds "$@"
LG=$(cl_loadgen)
cl_init
rows=$PERF_TMP/rows
: >"$rows"
load_start=$(cl_loadavg)

# run_load LABEL ROUND CASE KEYARGS...: warm-up, then the three loadgens at once; appends a row.
run_load() {
  local label=$1 round=$2 case=$3 i c0 c1 t0 t1 n0 n1 pids=()
  shift 3
  for i in 0 1 2; do
    taskset -c "$CORES" "$LG" -c "$CONNS" -d 1s --warmup 0s --req call "$@" \
      "http://127.0.0.1:${ports[$i]}/" >/dev/null 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  pids=()
  n0=0; for i in 0 1 2; do n0=$((n0 + $(cl_node_commands "${ports[$i]}"))); done
  c0=$(cl_commands "$CL_REDIS_PORT"); e0=$(cl_cmdstats "$CL_REDIS_PORT" | awk '$1 == "evalsha" { print $2 }'); t0=$(cl_now)
  for i in 0 1 2; do
    taskset -c "$CORES" "$LG" -c "$CONNS" -d "${DURATION}s" --warmup 0s --req call "$@" --json \
      "http://127.0.0.1:${ports[$i]}/" >"$PERF_TMP/lg.$i.json" 2>"$PERF_TMP/lg.$i.err" &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  t1=$(cl_now); c1=$(cl_commands "$CL_REDIS_PORT"); e1=$(cl_cmdstats "$CL_REDIS_PORT" | awk '$1 == "evalsha" { print $2 }')
  n1=0; for i in 0 1 2; do n1=$((n1 + $(cl_node_commands "${ports[$i]}"))); done
  local resp ok
  resp=$(cat "$PERF_TMP"/lg.[012].json | python3 -c 'import json,sys; print(sum(json.loads(l)["responses"] for l in sys.stdin if l.strip()))')
  ok=$(cat "$PERF_TMP"/lg.[012].json | python3 -c 'import json,sys; print(sum(json.loads(l)["ok"] for l in sys.stdin if l.strip()))')
  echo "$label $round $case $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') $((c1 - c0)) $((${e1:-0} - ${e0:-0})) $((n1 - n0)) $resp $ok" >>"$rows"
}

# run_quiet LABEL ROUND CASE: QUIET s without traffic; appends a row.
run_quiet() {
  local c0 c1 t0 t1 e0 e1 n0 n1 i
  n0=0; for i in 0 1 2; do n0=$((n0 + $(cl_node_commands "${ports[$i]}"))); done
  c0=$(cl_commands "$CL_REDIS_PORT"); e0=$(cl_cmdstats "$CL_REDIS_PORT" | awk '$1 == "evalsha" { print $2 }'); t0=$(cl_now)
  sleep "$QUIET"
  t1=$(cl_now); c1=$(cl_commands "$CL_REDIS_PORT"); e1=$(cl_cmdstats "$CL_REDIS_PORT" | awk '$1 == "evalsha" { print $2 }')
  n1=0; for i in 0 1 2; do n1=$((n1 + $(cl_node_commands "${ports[$i]}"))); done
  echo "$1 $2 $3 $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') $((c1 - c0)) $((${e1:-0} - ${e0:-0})) $((n1 - n0)) 0 0" >>"$rows"
}

for round in $(seq "$ROUNDS"); do
  for b in "${!CL_LABELS[@]}"; do
    label=${CL_LABELS[$b]}; bin=${CL_BINS[$b]}
    perf_log "round $round: $label (load $(cl_loadavg))"
    cl_redis_start "redis-$label-$round" "$CORES"
    for i in 1 2 3; do cl_config "$PERF_TMP/n$i.toml" "$CL_REDIS_PORT" "n$i"; done
    hot=$(cl_key_create "$bin" "$PERF_TMP/n1.toml" hot)
    cl_put_keys "$CL_REDIS_PORT" "$KEYS" hot "$PERF_TMP/zipf-keys.txt"
    ports=(); npids=()
    for i in 1 2 3; do
      cl_node_spawn "n$i-$label-$round" "$CORES" "$bin" "$PERF_TMP/n$i.toml"
      ports+=("$CL_NODE_PORT"); npids+=("$CL_NODE_PID")
    done
    for i in 0 1 2; do cl_node_ready "n$((i + 1))-$label-$round" "${npids[$i]}" "${ports[$i]}"; done
    for i in 1 2 3; do cl_wait_keys "n$i-$label-$round" $((KEYS + 1)); done
    sleep "$SETTLE"
    run_quiet "$label" "$round" quiet
    run_load "$label" "$round" hot --key "$hot"
    sleep "$SETTLE"
    run_load "$label" "$round" zipf --keys "$PERF_TMP/zipf-keys.txt" --zipf "$ZIPF"
    sleep "$AFTER"
    run_quiet "$label" "$round" quiet-after
    [ -n "${VERBOSE:-}" ] && cl_cmdstats "$CL_REDIS_PORT" >&2
    cl_stop_all "${npids[@]}"
    cl_stop "$CL_REDIS_PID"
  done
done
load_end=$(cl_loadavg)
[ -n "${RAW:-}" ] && cp "$rows" "$RAW"

python3 - "$rows" "$ROUNDS" "$DURATION" "$QUIET" "$CONNS" "$KEYS" "$ZIPF" "$load_start" "$load_end" "${CL_LABELS[@]}" <<'PY'
import statistics, sys
rows, rounds, duration, quiet, conns, keys, zipf, l0, l1, *labels = sys.argv[1:]
data = {}
for line in open(rows):
    label, rnd, case, secs, cmds, evals, ncmds, resp, ok = line.split()
    data.setdefault((label, rnd), {})[case] = dict(
        secs=float(secs), cmds=int(cmds), evals=int(evals), ncmds=int(ncmds), resp=int(resp),
        ok=int(ok))
med = lambda xs: statistics.median(xs) if xs else float("nan")
print(f"Redis commands as INFO commandstats counts them (script calls included), three nodes "
      f"(`--threads 1`), {keys} + 1 keys loaded, {rounds} rounds; load phases {duration} s, "
      f"3 loadgens x {conns} connections, billed MCP tools/call; quiet phases {quiet} s. "
      f"Medians (min-max). Load average {l0} at the start, {l1} at the end.\n")
print("Quiet rows give per second what load rows give per 1,000 requests (scripts, nodes' own "
      "count). \"net of quiet\" subtracts the round's quiet rate over the load phase's time.\n")
fmt = lambda xs, f: f"{f.format(med(xs))} ({f.format(min(xs))}-{f.format(max(xs))})" if xs else "-"
print("| build | phase | req/s (3 nodes) | Redis commands/s | per 1,000 requests | net of quiet, per 1,000 | scripts (EVALSHA) per 1,000 | commands per script | nodes' own count per 1,000 | not ok |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
names = {"quiet": "quiet (no traffic)", "hot": "one hot key", "zipf": f"{keys} keys, Zipf {zipf}",
         "quiet-after": "quiet again (after the load)"}
for label in labels:
    rs = [v for (l, r), v in sorted(data.items()) if l == label]
    for case in ("quiet", "hot", "zipf", "quiet-after"):
        xs = [r[case] for r in rs if case in r]
        if not xs:
            continue
        rate = [x["cmds"] / x["secs"] for x in xs]
        if case.startswith("quiet"):
            nrate = [x["ncmds"] / x["secs"] for x in xs]
            cps = [x["cmds"] / x["evals"] for x in xs if x["evals"]]
            print(f"| {label} | {names[case]} | 0 | {fmt(rate, '{:,.1f}')} | - | - | "
                  f"{med([x['evals'] / x['secs'] for x in xs]):,.1f}/s | "
                  f"{(f'{med(cps):.1f}' if cps else '-')} | {med(nrate):,.1f}/s | - |")
            continue
        per = [x["cmds"] * 1000 / max(1, x["resp"]) for x in xs]
        qr = [r["quiet"]["cmds"] / r["quiet"]["secs"] for r in rs if case in r]
        net = [max(0.0, x["cmds"] - q * x["secs"]) * 1000 / max(1, x["resp"]) for x, q in zip(xs, qr)]
        ev = [x["evals"] * 1000 / max(1, x["resp"]) for x in xs]
        nc = [x["ncmds"] * 1000 / max(1, x["resp"]) for x in xs]
        rps = [x["resp"] / x["secs"] for x in xs]
        bad = sum(x["resp"] - x["ok"] for x in xs)
        cps = [x["cmds"] / x["evals"] for x in xs if x["evals"]]
        print(f"| {label} | {names[case]} | {med(rps):,.0f} | {fmt(rate, '{:,.1f}')} | "
              f"{fmt(per, '{:.2f}')} | {fmt(net, '{:.2f}')} | {med(ev):.2f} | "
              f"{(f'{med(cps):.1f}' if cps else '-')} | {med(nc):.2f} | {bad} |")
PY
