#!/usr/bin/env bash
# `tollgate index build` of one corpus by two binaries side by side, pinned to one core:
# CPU (user + sys), wall and peak RSS per run, alternating base and new, then the medians; the
# two index files are compared byte for byte (the build must not change the index). Each run
# starts --pause seconds after the one before: this VM hands memory a process frees back to the
# host within a second or two, and a build that starts sooner gets some of the previous run's
# pages cheaply (its system time then varies by 1-2 s between identical runs). Other work on
# the machine only adds CPU time (cache and core sharing): the least CPU of each side is the
# figure least disturbed by it.
#
#   perf/search/build-ab.sh --base OLD/tollgate [--new build/release/tollgate]
#       [--corpus /work/tmp/c1m.jsonl] [--rounds 3] [--core 0] [--dir /tmp/tollgate-build-ab]
#       [--pause 5]
set -euo pipefail
base= new=build/release/tollgate corpus=/work/tmp/c1m.jsonl rounds=3 core=0
dir=/tmp/tollgate-build-ab pause=5
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --core) core=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --pause) pause=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "build-ab: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$base" ] || { echo "build-ab: --base BINARY is required" >&2; exit 2; }
mkdir -p "$dir"
out="$dir/runs.tsv"
: >"$out"
for r in $(seq 1 "$rounds"); do
  for which in base new; do
    bin=$base
    [ "$which" = new ] && bin=$new
    sleep "$pause"
    /usr/bin/time -f "$which\t%U\t%S\t%e\t%M\t%R" -a -o "$out" taskset -c "$core" "$bin" index build \
      --corpus "$corpus" --out "$dir/$which.idx" 2>/dev/null
    tail -1 "$out"
  done
done
if cmp -s "$dir/base.idx" "$dir/new.idx"; then
  echo "index files: identical ($(stat -c %s "$dir/new.idx") bytes)"
else
  echo "index files: DIFFER"
fi
python3 - "$out" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
for which in ("base", "new"):
    r = [x for x in rows if x[0] == which]
    cpu = statistics.median(float(x[1]) + float(x[2]) for x in r)
    user = statistics.median(float(x[1]) for x in r)
    sys_ = statistics.median(float(x[2]) for x in r)
    wall = statistics.median(float(x[3]) for x in r)
    rss = statistics.median(int(x[4]) for x in r) / 1024
    faults = statistics.median(int(x[5]) for x in r)
    low = min(float(x[1]) + float(x[2]) for x in r)
    med[which] = (cpu, wall, rss, low)
    print(f"{which}: CPU {cpu:.2f} s (user {user:.2f}, sys {sys_:.2f}), wall {wall:.2f} s, "
          f"peak RSS {rss:.0f} MB, minor faults {faults:.0f} (medians of {len(r)}); "
          f"least CPU {low:.2f} s")
b, n = med["base"], med["new"]
print(f"new / base: CPU {n[0] / b[0]:.2f}x (least {n[3] / b[3]:.2f}x), wall {n[1] / b[1]:.2f}x, "
      f"peak RSS {n[2] / b[2]:.2f}x")
PY
