# shellcheck shell=bash
# Shared helpers for the perf/cluster/ scripts (sourced, not run). Bash 5.
#
# On top of perf/lib.sh (every process started through perf_start, stopped by its PID only):
# a redis-server on a free port in the run's temp dir, cluster nodes, keys written straight into
# Redis in the layout include/tollgate/cluster/cluster.h describes, and Redis's own command
# count (INFO commandstats: calls made inside scripts are counted under their own commands).

# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

CL_PREFIX=${CL_PREFIX:-tollgate:}

# cl_builds LABEL=DIR...: parses the build arguments into CL_LABELS / CL_BINS. A DIR holds
# `tollgate` (its layout is perf/cluster/measure.sh's BUILD_DIR); a bare DIR is labelled by its
# base name. Default: build/release as "new".
cl_builds() {
  CL_LABELS=()
  CL_BINS=()
  [ $# -gt 0 ] || set -- "new=$PERF_ROOT/build/release"
  local a label dir
  for a in "$@"; do
    if [[ "$a" == *=* ]]; then label=${a%%=*}; dir=${a#*=}; else dir=$a; label=$(basename "$a"); fi
    [ -x "$dir/tollgate" ] || perf_die "no $dir/tollgate (build: cmake --build --preset release --target tollgate loadgen)"
    CL_LABELS+=("$label")
    CL_BINS+=("$(cd "$dir" && pwd)/tollgate")
  done
}

# cl_loadgen: the loadgen binary (LOADGEN, else the first build dir's tools/loadgen/loadgen,
# else build/release's).
cl_loadgen() {
  local c
  for c in "${LOADGEN:-}" "$(dirname "${CL_BINS[0]}")/tools/loadgen/loadgen" \
      "$PERF_ROOT/build/release/tools/loadgen/loadgen"; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  perf_die "no loadgen (cmake --build --preset release --target loadgen, or LOADGEN=PATH)"
}

cl_need_redis() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
    perf_die "need redis-server and redis-cli (tools/install-deps.sh)"
}

# cl_redis_start NAME CORES: a redis-server without persistence in $PERF_TMP/NAME, on a free
# port, pinned to CORES (e.g. 0-1). Sets CL_REDIS_PID and CL_REDIS_PORT.
cl_redis_start() {
  local name=$1 cores=$2 i
  mkdir -p "$PERF_TMP/$name"
  CL_REDIS_PORT=$(perf_free_port)
  perf_start "$name" "$cores" redis-server --port "$CL_REDIS_PORT" --bind 127.0.0.1 \
    --dir "$PERF_TMP/$name" --save "" --appendonly no --loglevel warning
  CL_REDIS_PID=$PERF_LAST_PID
  for i in $(seq 100); do
    redis-cli -p "$CL_REDIS_PORT" ping >/dev/null 2>&1 && return 0
    kill -0 "$CL_REDIS_PID" 2>/dev/null || break
    sleep 0.1
  done
  cat "$PERF_TMP/$name.log" >&2
  perf_die "redis-server ($name) did not start"
}

# cl_config FILE PORT NODE [EXTRA_TOML]: a config with the plans every script uses and
# [cluster] on 127.0.0.1:PORT as NODE (no [cluster] when PORT is empty).
#   hot   unlimited bill plan (rate and quota never reached)
#   stopq a stop plan with a rate that is never reached and a quota the runs do not reach
cl_config() {
  local file=$1 port=$2 node=$3 extra=${4:-}
  cat >"$file" <<EOT
[quota]
demo_plan = "hot"

[plans.hot]
rate_per_sec = 1000000000
burst = 1000000000
monthly_quota = 1099511627776
overage = "bill"

[plans.stopq]
rate_per_sec = 1000000000
burst = 1000000000
monthly_quota = 1000000000
overage = "stop"
$extra
EOT
  if [ -n "$port" ]; then
    printf '\n[cluster]\nredis = "127.0.0.1:%s"\nnode = "%s"\n' "$port" "$node" >>"$file"
  fi
}

# cl_node_spawn NAME CORES BIN CONFIG: starts `BIN serve --threads 1 --sample` on a free port
# with its own data dir, without waiting. Sets CL_NODE_PID and CL_NODE_PORT.
cl_node_spawn() {
  local name=$1 cores=$2 bin=$3 config=$4
  CL_NODE_PORT=$(perf_free_port)
  perf_start "$name" "$cores" "$bin" serve --listen "127.0.0.1:$CL_NODE_PORT" --threads 1 \
    --data-dir "$PERF_TMP/$name.d" --sample --config "$config"
  CL_NODE_PID=$PERF_LAST_PID
}

# cl_node_ready NAME PID PORT: waits (up to 120 s) until the node listens and /readyz answers
# 200; dies with its log's tail if it exits first.
cl_node_ready() {
  local name=$1 pid=$2 port=$3 i
  for i in $(seq 1200); do
    kill -0 "$pid" 2>/dev/null ||
      { tail -n 20 "$PERF_TMP/$name.log" >&2; perf_die "$name exited"; }
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 \
      "http://127.0.0.1:$port/readyz" 2>/dev/null)" = 200 ] && return 0
    sleep 0.1
  done
  tail -n 20 "$PERF_TMP/$name.log" >&2
  perf_die "$name not ready after 120 s"
}

# cl_node_start NAME CORES BIN CONFIG: cl_node_spawn, then cl_node_ready.
cl_node_start() {
  cl_node_spawn "$@"
  cl_node_ready "$1" "$CL_NODE_PID" "$CL_NODE_PORT"
}

# cl_key_create BIN CONFIG PLAN: `keys create` (the build's own CLI, which also sets the key
# set's epoch where the build has one); prints the secret.
cl_key_create() {
  "$1" keys create --account perf --plan "$3" --config "$2" 2>/dev/null
}

# cl_put_keys PORT N PLAN SECRETS_OUT: writes N new keys of PLAN (account perf) straight into
# Redis (P{keys}:keys, P{keys}:accounts, then INCR P{keys}:version) with redis-cli --pipe, and
# their secrets, one a line, to SECRETS_OUT.
cl_put_keys() {
  local port=$1 n=$2 plan=$3 out=$4
  python3 - "$n" "$plan" "$out" "$CL_PREFIX" <<'PY' | redis-cli -p "$port" --pipe >/dev/null
import hashlib, os, sys, time
n, plan, out, prefix = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def cmd(*args):
    b = [f"*{len(args)}\r\n".encode()]
    for a in args:
        a = a.encode()
        b.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(b)
w = sys.stdout.buffer
now = str(int(time.time()))
batch = []
with open(out, "w") as f:
    for i in range(n):
        secret = "tg_live_" + os.urandom(20).hex()
        kid = "key_" + os.urandom(8).hex()
        f.write(secret + "\n")
        batch += [kid, f"{hashlib.sha256(secret.encode()).hexdigest()} perf {plan} {now} active"]
        if len(batch) >= 2000:
            w.write(cmd("HSET", prefix + "{keys}:keys", *batch)); batch = []
    if batch:
        w.write(cmd("HSET", prefix + "{keys}:keys", *batch))
w.write(cmd("HSET", prefix + "{keys}:accounts", "perf", "active"))
w.write(cmd("INCR", prefix + "{keys}:version"))
PY
}

# cl_wait_keys NAME N: waits (up to 120 s) until node NAME's log says it holds N keys in force.
cl_wait_keys() {
  local name=$1 n=$2 i
  for i in $(seq 1200); do
    python3 - "$PERF_TMP/$name.log" "$n" <<'PY' && return 0
import re, sys
t = open(sys.argv[1], errors="replace").read()
# "keys loaded: N key(s) in force" at start; "keys reloaded: A added ..., U unchanged" later
n = None
for m in re.finditer(r"keys loaded: (\d+) key|cluster: (\d+) key\(s\) loaded|"
                     r"keys reloaded: (\d+) added.*?(\d+) unchanged", t):
    n = int(m.group(1) or m.group(2) or 0) if not m.group(3) else int(m.group(3)) + int(m.group(4))
sys.exit(0 if n is not None and n >= int(sys.argv[2]) else 1)
PY
    sleep 0.1
  done
  tail -n 5 "$PERF_TMP/$name.log" >&2
  perf_die "$name did not load $n keys in 120 s"
}

# cl_commands PORT: every command Redis has run (INFO commandstats calls), less the INFO and
# CONFIG calls the scripts make themselves.
cl_commands() {
  redis-cli -p "$1" info commandstats |
    awk -F'[:,=]' '/^cmdstat_/ && $1 !~ /^cmdstat_(info|config)/ { s += $3 } END { print s + 0 }'
}

# cl_cmdstats PORT: "COMMAND CALLS" per line (the same exclusions), for breakdowns.
cl_cmdstats() {
  redis-cli -p "$1" info commandstats |
    awk -F'[:,=]' '/^cmdstat_/ && $1 !~ /^cmdstat_(info|config)/ { sub(/^cmdstat_/, "", $1); print $1, $3 }'
}

cl_now() { date +%s.%N; }
cl_loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# cl_init: perf_init, with cl_cleanup as the exit trap.
cl_init() {
  perf_init
  trap cl_cleanup EXIT
}

# cl_cleanup: perf_cleanup for `set -e` scripts: perf_stop's `wait` returns a stopped
# process's status (137 after its SIGKILL), which must not end the cleanup.
cl_cleanup() {
  local pid
  for pid in "${PERF_PIDS[@]}"; do
    perf_stop "$pid" || true
  done
  if [ -n "$PERF_TMP" ] && [ "$PERF_KEEP_TMP" != 1 ]; then
    rm -rf "$PERF_TMP"
  fi
}

# cl_stop PID: perf_stop, and forgets the PID (so the exit trap never signals a reused one).
cl_stop() {
  local pid=$1 i
  perf_stop "$pid" || true
  for i in "${!PERF_PIDS[@]}"; do
    [ "${PERF_PIDS[$i]}" = "$pid" ] && unset 'PERF_PIDS[i]'
  done
  PERF_PIDS=("${PERF_PIDS[@]}")
}

# cl_node_commands PORT: the node's own count of commands it sent
# (tollgate_cluster_redis_commands_total), 0 when the build has no such metric.
cl_node_commands() {
  local v
  v=$(curl -s --max-time 2 "http://127.0.0.1:$1/metrics" |
    awk '/^tollgate_cluster_redis_commands_total/ { s += $NF; f = 1 } END { if (f) printf "%d", s }')
  echo "${v:-0}"
}

# cl_stop_all PID...: SIGTERM to all at once, then cl_stop each (they stop in parallel).
cl_stop_all() {
  local pid
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "$@"; do cl_stop "$pid"; done
}
