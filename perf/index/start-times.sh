#!/usr/bin/env bash
# Time to serving of `tollgate serve --corpus F`: the first start (no index file: parse, index,
# write the index beside F) beside later starts (the index file mapped), in one run on one
# machine. Serving = the first HTTP answer on /healthz, timed from the launch.
#
#   perf/index/start-times.sh --corpus FILE [--rounds N] [--bin TOLLGATE]
#   perf/index/start-times.sh --generate 1000000 --work DIR     (writes DIR/corpus-1000000-1.jsonl once)
#
# Removes FILE.tollgate-index before the first start (and leaves the last one in place).
# Prints one line per start and a summary: first, median of the later ones, their ratio, the
# index file's size, peak RSS of each kind of start and its RSS once serving.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

corpus="" rounds=3 bin="" generate="" work=""
while [ $# -gt 0 ]; do
  case $1 in
    --corpus) corpus=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --generate) generate=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) perf_die "unknown option $1" ;;
  esac
done
bin=${bin:-$(perf_default_tollgate)}
[ -x "$bin" ] || perf_die "no tollgate binary at $bin (build the release preset)"
if [ -n "$generate" ]; then
  [ -n "$work" ] || perf_die "--generate needs --work DIR (outside the repository)"
  mkdir -p "$work"
  corpus="$work/corpus-$generate-1.jsonl"
  if [ ! -s "$corpus" ]; then
    perf_log "generating $corpus"
    "$bin" corpus generate --count "$generate" --seed 1 >"$corpus.part"
    mv "$corpus.part" "$corpus"
  fi
fi
[ -s "$corpus" ] || perf_die "--corpus FILE (or --generate N --work DIR) is required"

perf_init
data="$PERF_TMP/data"
index="$corpus.tollgate-index"
rm -f "$index"

# start_once NAME: launches serve, waits for its first HTTP answer; prints "secs peak_rss_mb
# cpu_secs rss_mb" (CPU: user + system of all its threads until then; less sensitive to a busy
# machine than the wall time; RSS: resident once serving, a second after the first answer).
start_once() {
  local name=$1 port t0 t1 pid rss cpu now
  port=$(perf_free_port)
  t0=$(date +%s.%N)
  "$bin" serve --corpus "$corpus" --data-dir "$data" --listen "127.0.0.1:$port" --threads 1 \
    >"$PERF_TMP/$name.log" 2>&1 &
  pid=$!
  PERF_PIDS+=("$pid")
  while ! curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/healthz" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$PERF_TMP/$name.log" >&2; perf_die "serve exited"; }
    sleep 0.02
  done
  t1=$(date +%s.%N)
  rss=$(awk '/VmHWM/ { print int($2 / 1024) }' "/proc/$pid/status")
  cpu=$(echo "$(perf_cpu_ticks "$pid") / $PERF_CLK_TCK" | bc -l)
  sleep 1
  now=$(awk '/VmRSS/ { print int($2 / 1024) }' "/proc/$pid/status")
  perf_stop "$pid"
  grep -E "index: |corpus: " "$PERF_TMP/$name.log" | sed 's/^/    /' >&2
  echo "$(echo "$t1 - $t0" | bc -l) $rss $cpu $now"
}

read -r first first_rss first_cpu first_now < <(start_once first)
printf 'first start (builds, writes the index): %.2f s, CPU %.2f s, peak RSS %s MB, RSS once serving %s MB\n' \
  "$first" "$first_cpu" "$first_rss" "$first_now"
[ -s "$index" ] || perf_die "the first start wrote no index at $index"
later=()
later_cpu=()
later_rss=0
later_now=0
for r in $(seq "$rounds"); do
  read -r secs rss cpu now < <(start_once "second-$r")
  later+=("$secs")
  later_cpu+=("$cpu")
  later_rss=$rss
  later_now=$now
  printf 'later start %d (maps the index): %.2f s, CPU %.2f s, peak RSS %s MB, RSS once serving %s MB\n' \
    "$r" "$secs" "$cpu" "$rss" "$now"
done
read -r med lo hi < <(printf '%s\n' "${later[@]}" | perf_median_minmax)
read -r cmed _ _ < <(printf '%s\n' "${later_cpu[@]}" | perf_median_minmax)
printf 'summary: corpus %s (%d MB), index %d MB; first %.2f s (CPU %.2f s), later median %.2f s (min %.2f, max %.2f; CPU %.2f s), %.1fx faster; peak RSS %s MB vs %s MB; RSS once serving %s MB vs %s MB; load %s\n' \
  "$corpus" $(( $(stat -c %s "$corpus") >> 20 )) $(( $(stat -c %s "$index") >> 20 )) \
  "$first" "$first_cpu" "$med" "$lo" "$hi" "$cmed" "$(echo "$first / $med" | bc -l)" "$first_rss" \
  "$later_rss" "$first_now" "$later_now" "$(cut -d' ' -f1-3 /proc/loadavg)"
