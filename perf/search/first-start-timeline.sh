#!/usr/bin/env bash
# Where one first start's wall time goes, core by core: `perf record` of `tollgate serve --corpus
# F` (no index yet) pinned to the given cores, to the first /healthz answer; its samples cut
# into slices of --bucket seconds, and per slice how busy each CPU was (its share of the
# samples a fully busy CPU gives) and the functions that took most of them. Shows which stages
# run on every core and which on one (or none: the disk). Needs root (perf).
#
#   perf/search/first-start-timeline.sh --corpus FILE [--bin build/release/tollgate]
#       [--cores 0,1] [--freq 300] [--bucket 0.5] [--top 3] [--dir /tmp/tollgate-timeline]
source "$(dirname "$0")/../lib.sh"

bin=build/release/tollgate corpus="" cores=0,1 freq=300 bucket=0.5 top=3
dir=/tmp/tollgate-timeline
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --cores) cores=$2; shift 2 ;;
    --freq) freq=$2; shift 2 ;;
    --bucket) bucket=$2; shift 2 ;;
    --top) top=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) perf_die "unknown option $1" ;;
  esac
done
[ -x "$bin" ] || perf_die "no binary at $bin"
[ -s "$corpus" ] || perf_die "--corpus FILE is required"
command -v perf >/dev/null || perf_die "perf is not installed (apt-get install linux-perf)"
perf_init
mkdir -p "$dir"
ln -f "$corpus" "$dir/corpus.jsonl" 2>/dev/null || cp "$corpus" "$dir/corpus.jsonl"
rm -rf "$dir/corpus.jsonl.tollgate-index" "$dir/data"
port=$(perf_free_port)
t0=$(date +%s.%N)
taskset -c "$cores" perf record -q -F "$freq" -a -C "$cores" -o "$dir/perf.data" -- \
  "$bin" serve --corpus "$dir/corpus.jsonl" --data-dir "$dir/data" \
  --listen "127.0.0.1:$port" --threads 1 >"$dir/serve.log" 2>&1 &
pid=$!
PERF_PIDS+=("$pid")
perf_wait_http "http://127.0.0.1:$port/healthz" 600 ||
  { tail -n 20 "$dir/serve.log" >&2; perf_die "serve did not answer /healthz"; }
t1=$(date +%s.%N)
# perf ends when the server does: stop the server, not perf.
server=$(pgrep -f -x "$bin serve --corpus $dir/corpus.jsonl --data-dir $dir/data --listen 127.0.0.1:$port --threads 1" | head -1)
[ -n "$server" ] && kill "$server"
wait "$pid" 2>/dev/null || true
echo "first /healthz answer after $(echo "$t1 - $t0" | bc -l | cut -c1-6) s"
perf script -i "$dir/perf.data" -F comm,cpu,time,ip,sym 2>/dev/null |
  python3 -c '
import re, sys, collections
freq, bucket, top, ncpu = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = []
sample = re.compile(r"^\s*(.+?)\s+\[(\d+)\]\s+([\d.]+):\s+[0-9a-f]+\s*(\S*)")
for line in sys.stdin:
    m = sample.match(line)
    if m:
        rows.append((float(m[3]), int(m[2]), m[1], m[4] or "?"))
if not rows:
    sys.exit("no samples")
t0 = min(r[0] for r in rows)
busy = collections.defaultdict(collections.Counter)
syms = collections.defaultdict(collections.Counter)
for t, cpu, comm, sym in rows:
    if comm == "swapper" or comm == "curl" or comm == "perf":
        continue  # idle, or the polling
    b = int((t - t0) / bucket)
    busy[b][cpu] += 1
    syms[b][sym] += 1
cpus = sorted({r[1] for r in rows})
print("from_s\t" + "\t".join(f"cpu{c}_busy" for c in cpus) + "\ttop functions (share of the slice)")
for b in range(max(busy) + 1 if busy else 0):
    n = sum(syms[b].values())
    tops = ", ".join(f"{s} {100 * k / n:.0f}%" for s, k in syms[b].most_common(top)) if n else "idle"
    print(f"{b * bucket:.1f}\t" + "\t".join(f"{min(1.0, busy[b][c] / (freq * bucket)):.2f}" for c in cpus) + "\t" + tops)
' "$freq" "$bucket" "$top" "$(echo "$cores" | tr ',' '\n' | wc -l)"
