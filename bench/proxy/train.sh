#!/usr/bin/env bash
# The training load of the profile-guided build (scripts/pgo-build.sh): the
# proxy benchmark's four cases (small JSON, the 100 KB Claude Code turn, 256
# SSE events back to back and at an engine's pace; see run.sh) sent through an
# instrumented `lmwarden serve` to the responder, with 16 connections and with
# 1, then a graceful stop (SIGTERM), at which the warden writes its counters.
#
#   train.sh LMWARDEN RESPONDER
# Environment: PGO_TRAIN_SECONDS per case and connection count (default 3),
# LMWARDEN_FIXTURES (default ../shared/fixtures), PGO_TRAIN_REPORT (a file
# to write the share of a CPU that other work took meanwhile to, below).
# Talks only to 127.0.0.1, stops by itself, kills what it started on exit.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/bench/proxy"
lmwarden="$1"
responder="$2"
seconds="${PGO_TRAIN_SECONDS:-3}"
fixtures="${LMWARDEN_FIXTURES:-$root/../shared/fixtures}"

prog=pgo-train
. "$here/common.sh"
ensure_commands wrk:wrk python3:python3
require_inputs "$lmwarden" "$responder" "$fixtures" "scripts/pgo-build.sh builds it"
start_work pgo-train

# Other work on the machine while the profile is made: the CPUs' time in
# user and system mode, less this script's and its processes' (the children
# it reaped, and the responder, read before it is stopped). The profile
# follows the paths the training takes, and beside other work they are not
# those of a quiet run: a profile made beside two busy processes cost the
# 100 KB case about 6 % more user time per request (docs/performance.md).
cpu_ticks_all() { awk '/^cpu / {print $2 + $3 + $4}' /proc/stat; }
ticks_of() {  # PID FIELD...: the sum of those fields of /proc/PID/stat (14 = utime)
  local pid=$1 stat f sum=0
  shift
  stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || { echo 0; return; }
  read -r -a f <<<"${stat##*) }"  # from field 3, the state
  for n in "$@"; do sum=$((sum + f[n - 3])); done
  echo "$sum"
}
started_ns="$(date +%s%N)"
busy_before="$(cpu_ticks_all)"
own_before="$(ticks_of $$ 14 15 16 17)"

"$responder" --port 0 --events 256 --max-seconds 600 >"$work/responder.log" 2>&1 &
responder_pid=$!
pids+=("$responder_pid")
upstream_port="$(port_from_log "$work/responder.log" bench_responder)"
write_warden_config "$work/lmwarden.yaml" 1 "$upstream_port"
"$lmwarden" serve --config "$work/lmwarden.yaml" --log-level warn >"$work/lmwarden.log" 2>&1 &
lmwarden_pid=$!
pids+=("$lmwarden_pid")
port="$(port_from_log "$work/lmwarden.log" "lmwarden serve")"

python3 "$here/prepare_cases.py" "$fixtures" "$work"
for c in small claude100k sse256 sse256paced; do
  for connections in 16 1; do
    wrk -t1 -c"$connections" -d"${seconds}s" --timeout 10s -s "$here/wrk.lua" \
      "http://127.0.0.1:$port" -- POST "${case_path[$c]}" "$work/$c.headers" "$work/$c.body" \
      >"$work/wrk.out" 2>&1 || true
    read -r requests errors < <(grep '^JSON ' "$work/wrk.out" | cut -c6- | python3 -c '
import json, sys
r = json.load(sys.stdin)
print(r["requests"], sum(r["errors"].values()))' 2>/dev/null || true)
    if [ -z "${requests:-}" ] || [ "$requests" -eq 0 ] || [ "$errors" -ne 0 ]; then
      echo "$prog: case $c with $connections connection(s) did not go through cleanly:" >&2
      cat "$work/wrk.out" "$work/lmwarden.log" >&2
      exit 1
    fi
    echo "$prog: $c, $connections connection(s): $requests requests"
  done
done

# The counters are written when the process exits normally.
kill -TERM "$lmwarden_pid"
if ! wait "$lmwarden_pid"; then
  echo "$prog: lmwarden did not stop cleanly:" >&2
  cat "$work/lmwarden.log" >&2
  exit 1
fi
pids=("$responder_pid")

responder_ticks="$(ticks_of "$responder_pid" 14 15)"
busy="$(($(cpu_ticks_all) - busy_before))"
own="$(($(ticks_of $$ 14 15 16 17) - own_before + responder_ticks))"
elapsed_ns="$(($(date +%s%N) - started_ns))"
other="$(awk -v other=$((busy - own)) -v hz="$(getconf CLK_TCK)" -v ns="$elapsed_ns" \
  'BEGIN {p = 100 * other / hz / (ns / 1e9); printf "%d", p < 0 ? 0 : p + 0.5}')"
echo "$prog: other work took ${other}% of a CPU while the profile was made"
[ -z "${PGO_TRAIN_REPORT:-}" ] || echo "$other" >"$PGO_TRAIN_REPORT"
if [ "$other" -ge 25 ]; then
  echo "$prog: warning: a profile made beside other work fits a quiet run's paths less well;" \
       "for figures, run PGO_RETRAIN=1 make build-pgo on a quiet machine" >&2
fi
