#!/usr/bin/env bash
# Proxy-overhead benchmark (make bench-proxy; docs/performance.md).
#
# One zero-latency upstream (bench_responder), and the same load sent to it
# directly, through nginx and through `lmwarden serve`, in one run:
#   small       POST /v1/chat/completions, ~100-byte body, JSON reply
#   claude100k  POST /v1/messages?beta=true, the Claude Code 2.1.332 turn
#               capture (shared/fixtures) with its headers, grown to 100 KB,
#               stream false, JSON reply
#   sse256      POST /v1/chat/completions, stream true with include_usage:
#               256 SSE content events, the usage event and [DONE], written
#               back to back
#   sse256paced the same reply at an engine's pace: one event per decode
#               step (BENCH_STEP_US, 2000 µs), the steps shared by
#               BENCH_PACED_CONNECTIONS (32) streams, as an engine emits a
#               batch's tokens together. Requests/s is then set by the pace;
#               the figure is the proxy's CPU per event, where each event is
#               a read and a write of its own (as in front of a real engine)
# Each case runs twice per target: a throughput run (wrk, 1 thread,
# BENCH_CONNECTIONS connections) and a latency run (1 connection, so the
# latency added by the proxy is not hidden by queueing). Rounds are
# interleaved and the best of BENCH_ROUNDS is kept per figure, which rejects
# interference from other work on the machine without favouring any target.
# A latency run is BENCH_LATENCY_SECONDS slices of one second, the three
# targets' slices taken in turn (direct, nginx, lmwarden, direct, ...): the
# latency of a streamed reply at one connection can settle for seconds at a
# time at either of two levels (for sse256, about 500–900 µs apart), behind either
# proxy alike (docs/performance-history.md, round 29), and
# alternating slices shares those stretches between the targets. The report
# keeps each target's best slice, pairs the targets' slices one by one, and
# judges the added p50 on the median of those pairs.
# Each throughput run also records the proxy's and the responder's CPU time
# and each CPU's busy and steal shares, for the report's CPU-per-request
# figures. Rounds alternate whether nginx or lmwarden goes first.
#
# CPUs (BENCH_LAYOUT): where wrk, the responder and the proxy under test
# (nginx: 1 worker; lmwarden: threads: 1) run, each pinned with taskset to
# one of the CPUs this script may use (CPU 0, 1, 2 below: the first, second
# and third of them).
#   separate      wrk on CPU 0, the responder on CPU 1, the proxy on CPU 2:
#                 with the load side on CPUs of its own, the proxy's CPU is
#                 what runs out first. Needs 3 CPUs.
#   shared-load   wrk and the responder share CPU 0, the proxy has CPU 1.
#   shared-proxy  wrk has CPU 0, the responder and the proxy share CPU 1: on
#                 2 CPUs, the layout where the proxy's work sets requests/s
#                 (with the responder's, about the same behind either proxy).
#                 Its latency runs mean little: direct requests cross CPUs
#                 there and proxied ones end on one.
#   mixed         shared-proxy for the throughput runs, shared-load for the
#                 latency runs (the responder is moved between them), so
#                 that requests/s is the proxy's and added latency compares
#                 like with like.
#   spread        for proxies of several threads: nothing pinned in the
#                 throughput runs, so that each proxy spreads its threads
#                 over the CPUs as it does by default; in the latency runs
#                 wrk and the responder on CPU 0 and the proxy (every
#                 thread) on CPU 1, as in mixed's. Needs 2 CPUs.
#   none          nothing pinned; also BENCH_PIN=0.
#   auto          (default) with one thread per proxy: separate with 3 CPUs
#                 or more, mixed with 2, none with 1; with more: spread with
#                 2 CPUs or more, none with 1.
# BENCH_PROXY_THREADS=N gives both proxies N workers/threads (nginx
# worker_processes, lmwarden threads); the layouts that pin a proxy to one
# CPU in the throughput runs (all but spread and none) are then refused.
#
# BENCH_SCHED=batch runs every thread of both proxies under SCHED_BATCH
# (chrt -b), the same for both; the default, other, leaves them as started
# (SCHED_OTHER). Where a proxy shares a CPU with the responder, a woken
# thread under SCHED_BATCH does not preempt the responder, so a streamed
# reply comes to the proxy in a few large bursts instead of one burst per
# wakeup: the runs then compare the proxies' work per byte without the
# scheduler's count of wakeups (docs/performance-history.md, round 30).
#
# Talks only to 127.0.0.1, stops by itself, kills what it started on exit.
# Installs nginx, wrk and python3 from Debian when they are missing.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/bench/proxy"
out_dir="${BENCH_OUT:-$root/build/bench}"
seconds="${BENCH_SECONDS:-6}"
latency_seconds="${BENCH_LATENCY_SECONDS:-4}"
rounds="${BENCH_ROUNDS:-3}"  # three, so that the paired median is a median
connections="${BENCH_CONNECTIONS:-16}"
paced_connections="${BENCH_PACED_CONNECTIONS:-32}"
step_us="${BENCH_STEP_US:-2000}"
threads="${BENCH_PROXY_THREADS:-1}"  # nginx workers and lmwarden I/O threads
sched="${BENCH_SCHED:-other}"  # both proxies' scheduling policy
events=256
wrk_timeout=10  # seconds without a reply after which wrk counts a timeout
# The profile-guided build by default (make build-pgo); LMWARDEN_BINARY picks
# another, e.g. build/release/src/lmwarden, the plain optimised one.
lmwarden="${LMWARDEN_BINARY:-$root/build/pgo/src/lmwarden}"
case "$(realpath "$lmwarden" 2>/dev/null)" in
  "$root"/build/pgo/*)
    lmwarden_build="profile-guided, build/pgo"
    # What scripts/pgo-build.sh's training measured of other work beside it.
    other="$(cat "$root/build/pgo/pgo-training.txt" 2>/dev/null || true)"
    [[ $other =~ ^[0-9]+$ ]] &&
      lmwarden_build+="; other work took $other% of a CPU while its profile was made" ;;
  "$root"/build/release/*) lmwarden_build="optimised without a profile, build/release" ;;
  *) lmwarden_build="$lmwarden" ;;
esac
responder="${BENCH_RESPONDER:-$root/build/release/bench/bench_responder}"
fixtures="${LMWARDEN_FIXTURES:-$root/../shared/fixtures}"

prog=bench-proxy
. "$here/common.sh"

# --- settings, checked before anything is installed or started ---------------
for knob in BENCH_SECONDS:"$seconds" BENCH_LATENCY_SECONDS:"$latency_seconds" BENCH_ROUNDS:"$rounds" \
            BENCH_CONNECTIONS:"$connections" BENCH_PACED_CONNECTIONS:"$paced_connections" \
            BENCH_STEP_US:"$step_us" BENCH_PROXY_THREADS:"$threads"; do
  [[ ${knob#*:} =~ ^[1-9][0-9]*$ ]] ||
    { echo "$prog: ${knob%%:*}=${knob#*:}: expected a whole number above 0" >&2; exit 2; }
done
case "$sched" in
  other | batch) ;;
  *) echo "$prog: BENCH_SCHED=$sched: use other or batch" >&2; exit 2 ;;
esac

# The CPUs this process may run on, in order (a container's cpuset need not
# start at 0): /proc's list, e.g. "0-3,8", one number each.
allowed_cpus() {
  local ranges range
  IFS=, read -r -a ranges <<<"$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)"
  for range in "${ranges[@]}"; do
    seq "${range%-*}" "${range#*-}"  # "5" is the range 5-5
  done | xargs
}
layout="${BENCH_LAYOUT:-auto}"
read -r -a allowed <<<"$(allowed_cpus)"
cpus=${#allowed[@]}
if [ "${BENCH_PIN:-1}" != 1 ]; then
  layout=none
elif [ "$layout" = auto ]; then
  if [ "$threads" != 1 ]; then
    if [ "$cpus" -ge 2 ]; then layout=spread; else layout=none; fi
  elif [ "$cpus" -ge 3 ]; then layout=separate
  elif [ "$cpus" = 2 ]; then layout=mixed
  else layout=none
  fi
fi
# The CPU of each, and the CPUs whose being full means the load side (wrk, or
# wrk and the responder) set requests/s rather than the proxy.
first="${allowed[0]:-}" second="${allowed[1]:-}" third="${allowed[2]:-}"
case "$layout" in
  separate) cpu_wrk=$first cpu_responder=$second cpu_proxy=$third load_cpus=$first,$second need=3 ;;
  shared-load) cpu_wrk=$first cpu_responder=$first cpu_proxy=$second load_cpus=$first need=2 ;;
  shared-proxy | mixed) cpu_wrk=$first cpu_responder=$second cpu_proxy=$second load_cpus=$first need=2 ;;
  spread) cpu_wrk='' cpu_responder='' cpu_proxy='' load_cpus='' need=2 ;;
  none) cpu_wrk='' cpu_responder='' cpu_proxy='' load_cpus='' need=1 ;;
  *) echo "$prog: BENCH_LAYOUT=$layout: use auto, separate, shared-load, shared-proxy, mixed, spread or none" >&2
     exit 2 ;;
esac
if [ "$threads" != 1 ] && [ "$layout" != spread ] && [ "$layout" != none ]; then
  echo "$prog: BENCH_LAYOUT=$layout pins each proxy to one CPU; with BENCH_PROXY_THREADS=$threads" \
    "use spread or none" >&2
  exit 2
fi
# Where the latency runs find each one, where a layout moves it there.
cpu_wrk_latency=$cpu_wrk cpu_responder_latency=$cpu_responder cpu_proxy_latency=$cpu_proxy
case "$layout" in
  mixed) cpu_responder_latency=$cpu_wrk ;;
  spread) cpu_wrk_latency=$first cpu_responder_latency=$first cpu_proxy_latency=$second ;;
esac
if [ "$cpus" -lt "$need" ]; then
  echo "$prog: BENCH_LAYOUT=$layout needs $need CPUs; this process may use $cpus" >&2
  exit 2
fi

# --- tools -------------------------------------------------------------------
ensure_commands nginx:nginx-light wrk:wrk python3:python3 taskset:util-linux chrt:util-linux
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
require_inputs "$lmwarden" "$responder" "$fixtures" "make bench-proxy builds it"

# --- processes ---------------------------------------------------------------
start_work bench-proxy

pinned() { if [ -n "$1" ]; then echo taskset -c "$1"; fi; }
read -r -a pin_wrk <<<"$(pinned "$cpu_wrk")"
read -r -a pin_wrk_latency <<<"$(pinned "$cpu_wrk_latency")"
read -r -a pin_responder <<<"$(pinned "$cpu_responder")"
read -r -a pin_proxy <<<"$(pinned "$cpu_proxy")"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_http() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
    sleep 0.1
  done
  echo "bench-proxy: nothing listens on port $1" >&2
  exit 1
}

"${pin_responder[@]}" "$responder" --port 0 --events "$events" --step-us "$step_us" --max-seconds 1800 \
  >"$work/responder.log" 2>&1 &
pids+=($!)
responder_pid=$!
upstream_port="$(port_from_log "$work/responder.log" bench_responder)"

nginx_port="$(free_port)"
sed -e "s|@DIR@|$work|g" -e "s|@PORT@|$nginx_port|g" -e "s|@UPSTREAM_PORT@|$upstream_port|g" \
  -e "s|^worker_processes 1;|worker_processes $threads;|" \
  "$here/nginx.conf.template" >"$work/nginx.conf"
"${pin_proxy[@]}" "$nginx_bin" -p "$work" -c "$work/nginx.conf" -e "$work/nginx-error.log" \
  >"$work/nginx.log" 2>&1 &
pids+=($!)
nginx_pid=$!
wait_http "$nginx_port"

write_warden_config "$work/lmwarden.yaml" "$threads" "$upstream_port"
"${pin_proxy[@]}" "$lmwarden" serve --config "$work/lmwarden.yaml" --log-level warn \
  >"$work/lmwarden.log" 2>&1 &
pids+=($!)
lmwarden_pid=$!
lmwarden_port="$(port_from_log "$work/lmwarden.log" "lmwarden serve")"

# --- requests ----------------------------------------------------------------
python3 "$here/prepare_cases.py" "$fixtures" "$work"

declare -A url=([direct]="http://127.0.0.1:$upstream_port" [nginx]="http://127.0.0.1:$nginx_port"
                [lmwarden]="http://127.0.0.1:$lmwarden_port")
cases=(small claude100k sse256 sse256paced)
declare -A case_connections=([small]="$connections" [claude100k]="$connections"
                             [sse256]="$connections" [sse256paced]="$paced_connections")
targets=(direct nginx lmwarden)
# Whose CPU time counts as the proxy's: the nginx master and its workers, the
# lmwarden process (taskset execs the server, so $! was the server's pid).
declare -A proxy_pids=([direct]="")
proxy_pids[nginx]="$nginx_pid $(pgrep -P "$nginx_pid" | xargs)"
proxy_pids[lmwarden]="$lmwarden_pid"

# The fields of a /proc/.../stat file after the command name (the first is
# field 3, the state), or nothing when it is gone.
stat_fields() {
  local stat
  stat="$(cat "$1" 2>/dev/null)" || return 0
  echo "${stat##*) }"
}
# The scheduling policies of every thread of the given processes, as the
# kernel has them (field 41 of each thread's stat), each once by name, e.g.
# "SCHED_OTHER" or "SCHED_BATCH SCHED_OTHER".
policies() {
  local pid task names=(SCHED_OTHER SCHED_FIFO SCHED_RR SCHED_BATCH SCHED_ISO SCHED_IDLE SCHED_DEADLINE)
  for pid in "$@"; do
    for task in /proc/"$pid"/task/*/stat; do
      read -r -a f <<<"$(stat_fields "$task")"
      if [ ${#f[@]} -gt 38 ]; then echo "${names[f[38]]:-policy ${f[38]}}"; fi
    done
  done | sort -u | xargs
}
if [ "$sched" = batch ]; then
  for pid in ${proxy_pids[nginx]} ${proxy_pids[lmwarden]}; do chrt -a -b -p 0 "$pid" >/dev/null; done
fi
# What the report names is what the kernel says, checked for what was asked;
# threads started later inherit it.
sched_policy="$(policies ${proxy_pids[nginx]} ${proxy_pids[lmwarden]})"
if [ "$sched" = batch ]; then
  for t in nginx lmwarden; do
    got="$(policies ${proxy_pids[$t]})"
    [ "$got" = SCHED_BATCH ] ||
      { echo "$prog: $t's threads are not all SCHED_BATCH (policies: $got)" >&2; exit 1; }
  done
fi

# CPU time (clock ticks, all threads) of the given processes: "user system".
cpu_ticks() {
  local user=0 system=0 pid
  for pid in "$@"; do
    read -r -a f <<<"$(stat_fields "/proc/$pid/stat")"
    [ ${#f[@]} -gt 12 ] || continue
    user=$((user + f[11]))      # utime
    system=$((system + f[12]))  # stime
  done
  echo "$user $system"
}
# CPU time in nanoseconds (every thread) of the given processes, as the
# scheduler accounts it (the first field of /proc/PID/task/*/schedstat).
# The ticks of /proc/PID/stat sample it: well enough for a process that runs
# for milliseconds at a time, badly for one woken every 2 ms for about 10 µs
# (sse256paced, where they put the two proxies 8-13 % apart and perf stat
# level; round 33). Empty where the kernel has no schedstat; a thread that
# ends between the listing and the read is left out.
have_schedstat=""
[ -r /proc/self/schedstat ] && have_schedstat=1
cpu_ns() {
  [ -n "$have_schedstat" ] || return 0
  local pid files=()
  for pid in "$@"; do files+=(/proc/"$pid"/task/*/schedstat); done
  { [ ${#files[@]} -gt 0 ] && cat "${files[@]}" 2>/dev/null || true; } |
    awk '{s += $1} END {printf "%.0f\n", s}'
}
# Context switches (voluntary and not, every thread) of the given processes:
# a thread that sleeps in epoll_wait and is woken again counts one. A thread
# that ends between the listing and the read is left out.
switches() {
  local pid files=()
  for pid in "$@"; do files+=(/proc/"$pid"/task/*/status); done
  { [ ${#files[@]} -gt 0 ] && cat "${files[@]}" 2>/dev/null || true; } |
    awk '/ctxt_switches/ {s += $2} END {print s + 0}'
}
# Ticks of each CPU from /proc/stat, "busy idle steal" per CPU: busy is
# user, nice, system, irq and softirq time; steal, the time a VM's host ran
# something else while this CPU had work, is kept apart, so that a host that
# takes time away does not pass for work of the load side.
cpu_busy() {
  awk '/^cpu[0-9]/ {print $2 + $3 + $4 + $7 + $8, $5 + $6, $9}' /proc/stat | tr '\n' ' '
}
# Which CPU each of those triples is, in /proc/stat's order (online CPUs only).
cpu_ids="$(awk '/^cpu[0-9]/ {print substr($1, 4)}' /proc/stat | paste -sd,)"

run_wrk() {  # target case connections seconds result-file [latency]
  local pu0 ps0 pu1 ps1 ru0 rs0 ru1 rs1 px0 px1 rx0 rx1 pn0 pn1 rn0 rn1 exact busy_before pin=("${pin_wrk[@]}")
  [ "${6:-}" = latency ] && pin=("${pin_wrk_latency[@]}")
  read -r pu0 ps0 <<<"$(cpu_ticks ${proxy_pids[$1]})"
  read -r ru0 rs0 <<<"$(cpu_ticks "$responder_pid")"
  px0="$(switches ${proxy_pids[$1]})"
  rx0="$(switches "$responder_pid")"
  pn0="$(cpu_ns ${proxy_pids[$1]})"
  rn0="$(cpu_ns "$responder_pid")"
  busy_before="$(cpu_busy)"
  "${pin[@]}" wrk -t1 -c"$3" -d"$4s" --timeout "${wrk_timeout}s" -s "$here/wrk.lua" "${url[$1]}" -- \
    POST "${case_path[$2]}" "$work/$2.headers" "$work/$2.body" >"$work/wrk.out" 2>&1 || true
  # Where the CPU went: the proxy's and the responder's time, and each CPU's
  # busy share (which CPU carries what: the layout above).
  read -r pu1 ps1 <<<"$(cpu_ticks ${proxy_pids[$1]})"
  read -r ru1 rs1 <<<"$(cpu_ticks "$responder_pid")"
  px1="$(switches ${proxy_pids[$1]})"
  rx1="$(switches "$responder_pid")"
  pn1="$(cpu_ns ${proxy_pids[$1]})"
  rn1="$(cpu_ns "$responder_pid")"
  exact=""
  if [ -n "$have_schedstat" ]; then
    # The direct target has no proxy: its time is 0, as its ticks are.
    exact="\"proxy_ns\": $(( ${pn1:-0} - ${pn0:-0} )), \"responder_ns\": $(( ${rn1:-0} - ${rn0:-0} )), "
  fi
  printf '{"ticks_per_s": %s, "proxy_ticks": %s, "proxy_user_ticks": %s, "responder_ticks": %s, %s"proxy_switches": %s, "responder_switches": %s, "cpu_ids": [%s], "cpu_before": [%s], "cpu_after": [%s]}\n' \
    "$(getconf CLK_TCK)" "$((pu1 + ps1 - pu0 - ps0))" "$((pu1 - pu0))" "$((ru1 + rs1 - ru0 - rs0))" \
    "$exact" "$((px1 - px0))" "$((rx1 - rx0))" "$cpu_ids" \
    "$(echo $busy_before | tr ' ' ',')" "$(cpu_busy | xargs | tr ' ' ',')" >"$5.cpu"
  if ! grep '^JSON ' "$work/wrk.out" | cut -c6- >"$5" || [ ! -s "$5" ]; then
    echo "bench-proxy: wrk failed for $1 $2:" >&2
    cat "$work/wrk.out" >&2
    exit 1
  fi
}

# " and CPU N for latency" where the latency runs move one.
for_latency() { if [ "$1" != "$2" ]; then echo " and ${2:-any} for latency"; fi; }
echo "bench-proxy: upstream :$upstream_port, nginx :$nginx_port, lmwarden :$lmwarden_port;" \
  "CPUs: $layout (wrk ${cpu_wrk:-any}$(for_latency "$cpu_wrk" "$cpu_wrk_latency")," \
  "responder ${cpu_responder:-any}$(for_latency "$cpu_responder" "$cpu_responder_latency")," \
  "proxy ${cpu_proxy:-any}$(for_latency "$cpu_proxy" "$cpu_proxy_latency"));" \
  "$rounds round(s) of ${seconds}s (c=$connections; sse256paced c=$paced_connections, a step every" \
  "${step_us} µs) + ${latency_seconds}s (c=1, in 1s slices taken in turn) per case and target;" \
  "both proxies' threads $sched_policy"
mkdir -p "$work/results"
# Moves the responder and the proxies (every thread) to where the layout has
# them for the throughput runs (throughput) or the latency runs (latency); a
# process the layout does not pin goes back to every CPU this script may use.
every_cpu="$(echo "${allowed[@]}" | tr ' ' ,)"
place() {  # throughput|latency
  local responder_cpu=$cpu_responder proxy_cpu=$cpu_proxy pid
  [ "$1" = latency ] && responder_cpu=$cpu_responder_latency proxy_cpu=$cpu_proxy_latency
  [ "$cpu_responder_latency" != "$cpu_responder" ] &&
    taskset -apc "${responder_cpu:-$every_cpu}" "$responder_pid" >/dev/null
  if [ "$cpu_proxy_latency" != "$cpu_proxy" ]; then
    for pid in ${proxy_pids[nginx]} ${proxy_pids[lmwarden]}; do
      taskset -apc "${proxy_cpu:-$every_cpu}" "$pid" >/dev/null
    done
  fi
  return 0
}
for c in "${cases[@]}"; do  # warm-up: pools filled, pages touched
  for t in "${targets[@]}"; do run_wrk "$t" "$c" 4 1 "$work/warmup.json"; done
done
for r in $(seq "$rounds"); do
  # Even rounds measure lmwarden before nginx. On a VM whose host takes more
  # time away as a run goes on (steal), the target measured later in a case
  # would otherwise always be the one that pays for it.
  order=("${targets[@]}")
  ((r % 2 == 0)) && order=(direct lmwarden nginx)
  # A case's throughput runs go back to back, then its latency runs, so that
  # the two proxies' runs of a figure are seconds apart (the paired ratios).
  for c in "${cases[@]}"; do
    place throughput
    for t in "${order[@]}"; do
      run_wrk "$t" "$c" "${case_connections[$c]}" "$seconds" "$work/results/$r.$c.$t.load.json"
      printf '.'
    done
    place latency
    for slice in $(seq "$latency_seconds"); do
      for t in "${order[@]}"; do
        run_wrk "$t" "$c" 1 1 "$work/results/$r.$c.$t.latency-$slice.json" latency
      done
    done
    printf '...'
  done
done
echo

mkdir -p "$out_dir"
python3 "$here/report.py" "$work/results" "$out_dir/proxy.json" \
  --connections "$connections" --seconds "$seconds" --latency-seconds "$latency_seconds" \
  --rounds "$rounds" --events "$events" --wrk-timeout "$wrk_timeout" --paced-connections "$paced_connections" \
  --step-us "$step_us" --threads "$threads" --sched-policy "$sched_policy" --layout "$layout" --cpu-wrk "$cpu_wrk" \
  --cpu-responder "$cpu_responder" --cpu-responder-latency "$cpu_responder_latency" \
  --cpu-proxy "$cpu_proxy" --cpu-wrk-latency "$cpu_wrk_latency" --cpu-proxy-latency "$cpu_proxy_latency" \
  --load-cpus "$load_cpus" \
  --nginx-version "$("$nginx_bin" -v 2>&1 | sed 's/.*nginx\///')" \
  --lmwarden-commit "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  --lmwarden-build "$lmwarden_build"
