#!/usr/bin/env bash
# `make soak`: a long run of many concurrent streaming conversations through
# the warden, in front of a simulated 4-rank vLLM server, watching the warden's
# memory. It stops by itself, leaves nothing running, and fails (exit 1) when
# any request failed, when requests are still in flight at the end, or when a
# process died.
#
# Environment (all optional):
#   SOAK_SECONDS     wall-clock length of the run (default 600)
#   SOAK_SESSIONS    concurrent conversations (default 32)
#   SOAK_TIME_SCALE  simulated engine speed-up (default 20)
#   SOAK_DP          simulated data-parallel ranks (default 4)
#   LMWARDEN_BIN     the binary (default build/lmwarden, built by make build)
#   SOAK_KEEP=1      keep the logs, config and bench report even on success
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${LMWARDEN_BIN:-build/lmwarden}
seconds=${SOAK_SECONDS:-600}
sessions=${SOAK_SESSIONS:-32}
scale=${SOAK_TIME_SCALE:-20}
dp=${SOAK_DP:-4}
model=soak
work=$(mktemp -d /tmp/lmwarden-soak.XXXXXX)
pids=()
status=1

cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$status" -eq 0 ] && [ "${SOAK_KEEP:-0}" != 1 ]; then
    rm -rf "$work"
  else
    echo "soak: logs, config and bench report in $work" >&2
  fi
}
trap cleanup EXIT
trap 'echo "soak: interrupted" >&2; exit 1' INT TERM

[ -x "$bin" ] || { echo "soak: $bin not found (run make build)" >&2; exit 1; }

# Sum of every series of one metric in the warden's /metrics (0 when it has
# none; "" when /metrics does not answer).
metric_sum() {
  local text
  text=$(curl -sf --max-time 5 "$warden_url/metrics") || return 0
  awk -v name="$1" '$1 ~ "^" name "([{]|$)" { sum += $NF } END { printf "%d", sum }' <<<"$text"
}

# A field of /proc/PID/status in kB (VmRSS, VmHWM).
proc_kb() { awk -v key="$2:" '$1 == key { print $2 }' "/proc/$1/status" 2>/dev/null || true; }

mib() { awk -v kb="$1" 'BEGIN { printf "%.1f MiB", kb / 1024 }'; }

source scripts/fleet.sh
start_fleet soak "$dp" 0 7

echo "soak: ${seconds} s, ${sessions} concurrent streaming conversations, ${dp} simulated ranks at ${scale}x"
echo "soak: warden ${warden_url} (pid ${warden_pid}), simulator ${sim_url}; work dir ${work}"
start_rss=$(proc_kb "$warden_pid" VmRSS)

# The driver: the benchmark's closed loop, one step as long as the soak, affinity on.
LMWARDEN_ADMIN_TOKEN=$token "$bin" bench --target "$warden_url" --model "$model" \
  --sessions "$sessions" --arms on --step-seconds "$((seconds * scale))" --time-scale "$scale" \
  --backend-metrics "$sim_url" --out "$work/bench" --quiet >"$work/bench.log" 2>&1 &
pids+=($!)
bench_pid=$!

# Sample the warden's memory every second until the driver ends (with a
# margin: the driver stops on its own when its step is over).
peak_rss=0
warm_rss=""
started=$(date +%s)
deadline=$((started + seconds + 120))
: >"$work/rss.tsv"
while kill -0 "$bench_pid" 2>/dev/null; do
  now=$(date +%s)
  if [ "$now" -gt "$deadline" ]; then
    echo "soak: the driver did not stop on time" >&2
    exit 1
  fi
  for pid in "$sim_pid" "$warden_pid"; do
    kill -0 "$pid" 2>/dev/null || { echo "soak: process $pid died" >&2; tail -20 "$work"/*.log >&2; exit 1; }
  done
  rss=$(proc_kb "$warden_pid" VmRSS)
  if [ -n "$rss" ]; then
    echo -e "$((now - started))\t${rss}" >>"$work/rss.tsv"
    [ "$rss" -gt "$peak_rss" ] && peak_rss=$rss
    # Memory once the conversation table has filled (a tenth of the way in).
    if [ -z "$warm_rss" ] && [ $((now - started)) -ge $((seconds / 10)) ]; then warm_rss=$rss; fi
  fi
  if [ $(((now - started) % 30)) -eq 0 ]; then
    echo "soak: $((now - started)) s  requests $(metric_sum lmwarden_requests_total)  in flight $(metric_sum lmwarden_in_flight)  conversations $(metric_sum lmwarden_live_conversations)  RSS $(mib "${rss:-0}")"
  fi
  sleep 1
done
bench_status=0
wait "$bench_pid" || bench_status=$?

# The driver closed what was still streaming; the warden must settle to zero.
in_flight=""
for _ in $(seq 1 100); do
  in_flight=$(metric_sum lmwarden_in_flight)
  [ "$in_flight" = 0 ] && break
  sleep 0.1
done
kill -0 "$warden_pid" 2>/dev/null || { echo "soak: the warden died" >&2; exit 1; }

results="$work/bench/results.json"
flat=$(tr -d ' \n' <"$results" 2>/dev/null || true)
sum_json() { { grep -o "\"$1\":[0-9]*" <<<"$flat" || true; } | awk -F: '{ s += $2 } END { printf "%d", s }'; }
sent=$(sum_json requests_sent)
failed=$(sum_json requests_failed)
turns=$({ grep -o '"turn_s":\[[^]]*\]' <<<"$flat" || true; } | tr ',' '\n' | grep -c '[0-9]' || true)
warden_requests=$(metric_sum lmwarden_requests_total)
upstream_errors=$(metric_sum lmwarden_upstream_errors_total)
conversations=$(metric_sum lmwarden_live_conversations)
final_rss=$(proc_kb "$warden_pid" VmRSS)
hwm=$(proc_kb "$warden_pid" VmHWM)

cat <<TEXT

soak summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), ${seconds} s, ${sessions} sessions, ${dp} ranks at ${scale}x)
  requests sent by the driver   ${sent} (${turns} turns completed; the rest were cut at the end)
  requests failed (driver)      ${failed}
  requests routed (warden)      ${warden_requests}
  upstream errors (warden)      ${upstream_errors}
  conversations in the table    ${conversations}
  in flight at the end          ${in_flight}
  warden RSS at start           $(mib "${start_rss:-0}")
  warden RSS after warm-up      $(mib "${warm_rss:-0}")
  warden RSS peak (sampled)     $(mib "$peak_rss")
  warden RSS final              $(mib "${final_rss:-0}")
  warden VmHWM                  $(mib "${hwm:-0}")
TEXT

status=0
if [ -z "$warden_requests" ] || [ -z "$upstream_errors" ] || [ -z "$in_flight" ]; then
  echo "soak: FAIL: the warden's /metrics did not answer" >&2
  status=1
fi
if [ "$bench_status" -ne 0 ]; then echo "soak: FAIL: the driver exited with $bench_status" >&2; status=1; fi
if [ "$sent" -eq 0 ]; then echo "soak: FAIL: no request was sent" >&2; status=1; fi
if [ "$failed" -ne 0 ] || [ "${upstream_errors:-0}" -ne 0 ]; then echo "soak: FAIL: errors" >&2; status=1; fi
if [ -n "$in_flight" ] && [ "$in_flight" != 0 ]; then echo "soak: FAIL: ${in_flight} request(s) still in flight" >&2; status=1; fi
[ "$status" -eq 0 ] && echo "soak: OK"
exit "$status"
