#!/usr/bin/env bash
# The training load of the profile-guided build (scripts/pgo-build.sh): the
# proxy benchmark's four cases (small JSON, the 100 KB Claude Code turn, 256
# SSE events back to back and at an engine's pace; see run.sh) sent through an
# instrumented `lmwarden serve` to the responder, with 16 connections and with
# 1, then a graceful stop (SIGTERM), at which the warden writes its counters.
#
#   train.sh LMWARDEN RESPONDER
# Environment: PGO_TRAIN_SECONDS per case and connection count (default 3),
# LMWARDEN_FIXTURES (default ../shared/fixtures).
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
