# Shared helpers for the perf/ scripts (sourced, not run). Bash 5.
#
# Every process a script starts goes through perf_start, which records its PID; perf_cleanup
# (installed as an EXIT trap by perf_init) stops exactly those PIDs and nothing else.

PERF_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PERF_PIDS=()
PERF_TMP=""
PERF_KEEP_TMP=${PERF_KEEP_TMP:-0}

perf_log() { printf '%s\n' "$*" >&2; }

# perf_default_tollgate: the release binary (build/release/tollgate, or where the app's
# CMakeLists puts it, build/release/src/app/tollgate).
perf_default_tollgate() {
  local b
  for b in "$PERF_ROOT/build/release/tollgate" "$PERF_ROOT/build/release/src/app/tollgate"; do
    [ -x "$b" ] && { echo "$b"; return; }
  done
  echo "$PERF_ROOT/build/release/tollgate"
}
perf_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# perf_corpus TOLLGATE COUNT SEED DIR: the path of DIR/corpus-COUNT-SEED.jsonl, generated with
# `TOLLGATE corpus generate` the first time and kept for the next runs.
perf_corpus() {
  local tg=$1 count=$2 seed=$3 dir=$4
  local corpus="$dir/corpus-$count-$seed.jsonl"
  mkdir -p "$dir"
  if [ ! -s "$corpus" ]; then
    perf_log "generating $count stories"
    "$tg" corpus generate --count "$count" --seed "$seed" >"$corpus.tmp"
    mv "$corpus.tmp" "$corpus"
  fi
  printf '%s\n' "$corpus"
}

# perf_init: makes the temp dir (PERF_TMP) and installs the cleanup trap.
perf_init() {
  PERF_TMP=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-perf.XXXXXX")
  trap perf_cleanup EXIT
  trap 'exit 130' INT TERM
}

perf_cleanup() {
  local pid
  for pid in "${PERF_PIDS[@]}"; do
    perf_stop "$pid"
  done
  if [ -n "$PERF_TMP" ] && [ "$PERF_KEEP_TMP" != 1 ]; then
    rm -rf "$PERF_TMP"
  fi
}

# perf_stop PID: SIGTERM, up to 5 s of grace, then SIGKILL. Only for PIDs we started.
perf_stop() {
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

# perf_start NAME CORE CMD...: starts CMD pinned to CORE (taskset execs it, so $! is the
# server's own PID), output to $PERF_TMP/NAME.log. Sets PERF_LAST_PID.
perf_start() {
  local name=$1 core=$2
  shift 2
  taskset -c "$core" "$@" >"$PERF_TMP/$name.log" 2>&1 &
  PERF_LAST_PID=$!
  PERF_PIDS+=("$PERF_LAST_PID")
}

# perf_wait_http URL [SECONDS]: waits until URL answers (any status). Fails after SECONDS.
perf_wait_http() {
  local url=$1 secs=${2:-20} i
  for i in $(seq $((secs * 10))); do
    if curl -s -o /dev/null --max-time 1 "$url" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# perf_wait_mcp NAME PID URL KEY: waits (up to 600 s) until the server started as NAME (pid PID,
# log $PERF_TMP/NAME.log) answers an MCP search_stories call at URL with API key KEY; dies with
# the log's tail if the process exits first, returns 1 on the timeout.
perf_wait_mcp() {
  local name=$1 pid=$2 url=$3 key=$4 i body
  body='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"rust"}}}'
  for i in $(seq 3000); do
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$PERF_TMP/$name.log" >&2; perf_die "$name exited"; }
    if curl -sf -o /dev/null --max-time 5 -H "Authorization: Bearer $key" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -d "$body" "$url" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

# perf_free_port: a TCP port on 127.0.0.1 that nothing listens on right now.
perf_free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  perf_die "no free port found"
}

# perf_cpu_ticks PID: utime + stime of the whole process (all threads), in clock ticks.
perf_cpu_ticks() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
  stat=${stat##*) }  # drop "pid (comm) ", comm may hold spaces
  # Fields after comm: state(3) ppid(4) ... utime(14) stime(15) => positions 12 and 13 here.
  set -- $stat
  echo $(( ${12} + ${13} ))
}
PERF_CLK_TCK=$(getconf CLK_TCK)

# perf_median_minmax: reads numbers on stdin, prints "median min max" (median of an even
# count is the mean of the middle two).
perf_median_minmax() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "nan nan nan"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.6g %.6g %.6g\n", m, v[1], v[NR] }'
}

# perf_to_us VALUE: converts wrk's "123.45us" / "1.2ms" / "2.00s" to microseconds.
perf_to_us() {
  awk -v x="$1" 'BEGIN {
    if (x ~ /us$/) { sub(/us$/, "", x); printf "%.1f", x }
    else if (x ~ /ms$/) { sub(/ms$/, "", x); printf "%.1f", x * 1000 }
    else if (x ~ /s$/) { sub(/s$/, "", x); printf "%.1f", x * 1000000 }
    else if (x ~ /m$/) { sub(/m$/, "", x); printf "%.1f", x * 60000000 }
    else printf "nan" }'
}

# perf_render_nginx PREFIX PORT BODY_FILE CONTENT_TYPE: writes PREFIX/nginx.conf from
# perf/peers/nginx.conf.in, answering `return 200` with BODY_FILE's bytes.
perf_render_nginx() {
  local prefix=$1 port=$2 body_file=$3 ctype=$4 temp_paths="" m v
  v=$(nginx -V 2>&1)
  temp_paths="  client_body_temp_path $prefix/client_body;"$'\n'
  for m in proxy fastcgi uwsgi scgi; do
    case "$v" in *"--without-http_${m}_module"*) continue ;; esac
    temp_paths+="  ${m}_temp_path $prefix/$m;"$'\n'
  done
  local dollar=""
  if grep -q '\$' "$body_file"; then dollar='  geo $dollar { default "$"; }'; fi
  DOLLAR="$dollar" PREFIX="$prefix" PORT="$port" CTYPE="$ctype" TEMP_PATHS="$temp_paths" BODY_FILE="$body_file" \
    perl -0777 -pe '
      BEGIN { local $/; open my $f, "<", $ENV{BODY_FILE} or die "body: $!"; $b = <$f>;
              $b =~ s/\\/\\\\/g; $b =~ s/"/\\"/g; $b =~ s/\$/\${dollar}/g;
              $b =~ s/\n/\\n/g; $b =~ s/\r/\\r/g; $b =~ s/\t/\\t/g; }
      s/\@PREFIX\@/$ENV{PREFIX}/g; s/\@PORT\@/$ENV{PORT}/g;
      s/\@CONTENT_TYPE\@/$ENV{CTYPE}/g; s/\@TEMP_PATHS\@\n/$ENV{TEMP_PATHS}/g;
      s/\@DOLLAR\@/$ENV{DOLLAR}/g;
      s/\@BODY\@/$b/g;' "$PERF_ROOT/perf/peers/nginx.conf.in" >"$prefix/nginx.conf"
}

# perf_start_nginx NAME CORE PORT BODY_FILE CONTENT_TYPE: Debian's nginx, one process, its own
# prefix under $PERF_TMP/NAME. Waits until it answers; checks it returns BODY_FILE's bytes.
perf_start_nginx() {
  local name=$1 core=$2 port=$3 body_file=$4 ctype=$5 prefix
  prefix="$PERF_TMP/$name"
  mkdir -p "$prefix"
  perf_render_nginx "$prefix" "$port" "$body_file" "$ctype"
  nginx -t -q -p "$prefix" -c "$prefix/nginx.conf" -e "$prefix/error.log" 2>"$prefix/check.log" ||
    { cat "$prefix/check.log" >&2; return 1; }
  perf_start "$name" "$core" nginx -p "$prefix" -c "$prefix/nginx.conf" -e "$prefix/error.log"
  perf_wait_http "http://127.0.0.1:$port/" 10 || return 1
  if ! cmp -s <(curl -s "http://127.0.0.1:$port/") "$body_file"; then
    perf_log "nginx ($name) does not return the expected body"
    return 1
  fi
}

# perf_wrk OUT CORE ARGS...: runs wrk pinned to CORE with --latency, then appends to OUT one
# line "requests rps p50_us p99_us client_cpu_s". Client CPU is wrk's user+sys from `times`.
perf_wrk() {
  local out=$1 core=$2 log
  shift 2
  log="$PERF_TMP/wrk.$$.$RANDOM.log"
  (
    taskset -c "$core" wrk --latency "$@" >"$log" 2>&1
    times >"$log.times"
  )
  local reqs rps p50 p99 cpu
  reqs=$(awk '/requests in/ { print $1; exit }' "$log")
  rps=$(awk '/^Requests\/sec:/ { print $2; exit }' "$log")
  p50=$(perf_to_us "$(awk '$1 == "50%" { print $2; exit }' "$log")")
  p99=$(perf_to_us "$(awk '$1 == "99%" { print $2; exit }' "$log")")
  cpu=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/);
                       printf "%.4f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$log.times")
  if grep -q "Non-2xx or 3xx responses\|Socket errors" "$log"; then
    perf_log "wrk: $(grep -h "Non-2xx\|Socket errors" "$log" | tr -s ' ' | paste -sd';')"
  fi
  echo "${reqs:-0} ${rps:-0} ${p50:-nan} ${p99:-nan} ${cpu:-nan}" >>"$out"
}
