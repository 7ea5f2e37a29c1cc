#!/usr/bin/env bash
# The first start of `tollgate serve --corpus F` (no index yet: parse, index, write the file, map
# it again, serve) by two binaries on one core and on two, interleaved in one run: wall time to
# the first /healthz answer and the process' CPU (user + system, all threads) until then;
# medians (min-max) per binary and core set, and the speed-up from one core to two. The index
# build's threads follow the process' CPU affinity (search::usable_cpus), so `taskset -c 0`
# builds on one thread and `taskset -c 0,1` on two. Every index file written is compared with
# the same binary's first one byte for byte (the thread count must not change the index; the
# two binaries may write different index formats).
#
# With --mapped, later starts instead: each side builds its index once (not timed), then every
# timed start maps it.
#
#   perf/search/first-start-ab.sh --base OLD/tollgate [--new build/release/tollgate]
#       --corpus FILE [--rounds 3] [--cores "0 0,1"] [--dir /tmp/tollgate-first-start] [--mapped]
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

base="" new=build/release/tollgate corpus="" rounds=3 cores="0 0,1"
dir=/tmp/tollgate-first-start mapped=0
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cores) cores=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --mapped) mapped=1; shift ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) perf_die "unknown option $1" ;;
  esac
done
[ -n "$base" ] && [ -x "$base" ] || perf_die "--base BINARY is required"
[ -x "$new" ] || perf_die "no binary at $new"
[ -s "$corpus" ] || perf_die "--corpus FILE is required"
perf_init
mkdir -p "$dir"
# Each side serves a hard link of the corpus from its own directory (its index beside it).
for which in base new; do
  mkdir -p "$dir/$which"
  ln -f "$corpus" "$dir/$which/corpus.jsonl" 2>/dev/null || cp "$corpus" "$dir/$which/corpus.jsonl"
done
rows="$dir/runs.tsv"
: >"$rows"

# start_once WHICH CORES: prints "wall_s cpu_s"
start_once() {
  local which=$1 set=$2 bin port t0 t1 pid cpu
  bin=$base
  [ "$which" = new ] && bin=$new
  [ "$mapped" = 1 ] || rm -f "$dir/$which/corpus.jsonl.tollgate-index"
  rm -rf "$dir/$which/data"
  port=$(perf_free_port)
  t0=$(date +%s.%N)
  taskset -c "$set" "$bin" serve --corpus "$dir/$which/corpus.jsonl" --data-dir "$dir/$which/data" \
    --listen "127.0.0.1:$port" --threads 1 >"$PERF_TMP/$which.log" 2>&1 &
  pid=$!
  PERF_PIDS+=("$pid")
  while ! curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/healthz" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$PERF_TMP/$which.log" >&2; perf_die "serve exited"; }
    sleep 0.02
  done
  t1=$(date +%s.%N)
  cpu=$(echo "$(perf_cpu_ticks "$pid") / $PERF_CLK_TCK" | bc -l)
  perf_stop "$pid"
  local idx="$dir/$which/corpus.jsonl.tollgate-index"
  if [ "$mapped" = 1 ]; then
    :  # the file each side built once, untouched
  elif [ ! -s "$dir/first-$which.idx" ]; then
    cp "$idx" "$dir/first-$which.idx"
  elif ! cmp -s "$idx" "$dir/first-$which.idx"; then
    perf_die "$which on cores $set wrote an index that differs from its first one"
  fi
  echo "$(echo "$t1 - $t0" | bc -l) $cpu"
}

rm -f "$dir/first-base.idx" "$dir/first-new.idx"
if [ "$mapped" = 1 ]; then  # each side's index, built once and not timed
  for which in base new; do
    bin=$base
    [ "$which" = new ] && bin=$new
    [ -s "$dir/$which/corpus.jsonl.tollgate-index" ] ||
      "$bin" index build --corpus "$dir/$which/corpus.jsonl" 2>/dev/null
  done
fi
# The sides alternate which starts first, round by round: a start can leave the host warmer
# or colder for the one after it (page cache, freed memory).
for r in $(seq "$rounds"); do
  order="base new"
  [ $((r % 2)) = 0 ] && order="new base"
  for set in $cores; do
    for which in $order; do
      read -r wall cpu < <(start_once "$which" "$set")
      printf '%s\t%s\t%.2f\t%.2f\n' "$which" "$set" "$wall" "$cpu" | tee -a "$rows"
    done
  done
done
[ "$mapped" = 1 ] || echo "index files: each binary's all identical (base $(stat -c %s \
  "$dir/first-base.idx") bytes, new $(stat -c %s "$dir/first-new.idx") bytes)"
python3 - "$rows" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
for which in ("base", "new"):
    for cores in dict.fromkeys(r[1] for r in rows):
        r = [x for x in rows if x[0] == which and x[1] == cores]
        wall = [float(x[2]) for x in r]
        cpu = [float(x[3]) for x in r]
        med[which, cores] = statistics.median(wall)
        print(f"{which} on cores {cores}: wall {statistics.median(wall):.2f} s "
              f"({min(wall):.2f}-{max(wall):.2f}), CPU {statistics.median(cpu):.2f} s "
              f"({min(cpu):.2f}-{max(cpu):.2f}), medians of {len(r)}")
sets = list(dict.fromkeys(r[1] for r in rows))
if len(sets) >= 2:
    for which in ("base", "new"):
        print(f"{which}: wall on cores {sets[0]} / on cores {sets[-1]}: "
              f"{med[which, sets[0]] / med[which, sets[-1]]:.2f}x")
for cores in sets:
    print(f"cores {cores}: wall new / base {med['new', cores] / med['base', cores]:.2f}x")
PY
