#!/usr/bin/env bash
# `make demo`: a simulated 4-rank vLLM server, the warden in front of it, and a
# handful of synthetic coding-agent conversations driven through the warden
# until Ctrl-C. Prints the URLs and, every few seconds, one summary line read
# from the warden's own /metrics. Leaves nothing running when it stops.
#
# Environment (all optional):
#   LMWARDEN_DEMO_PORT        warden port (default 8080; 0 = any free port)
#   LMWARDEN_DEMO_SESSIONS    concurrent conversations (default 8)
#   LMWARDEN_DEMO_TIME_SCALE  simulated engine speed-up (default 10)
#   LMWARDEN_DEMO_SECONDS     stop by itself after this many seconds (default: run until Ctrl-C)
#   LMWARDEN_BIN              the binary (default build/lmwarden, built by make build)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${LMWARDEN_BIN:-build/lmwarden}
port=${LMWARDEN_DEMO_PORT:-8080}
sessions=${LMWARDEN_DEMO_SESSIONS:-8}
scale=${LMWARDEN_DEMO_TIME_SCALE:-10}
model=qwen3-4b
work=$(mktemp -d /tmp/lmwarden-demo.XXXXXX)
pids=()

cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
  echo
  echo "demo stopped; nothing left running"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

source scripts/fleet.sh
start_fleet demo 4 "$port" 1

# The driver: the benchmark's closed loop, one long step with affinity on.
LMWARDEN_ADMIN_TOKEN=$token "$bin" bench --target "$warden_url" --model "$model" \
  --sessions "$sessions" --arms on --step-seconds 864000 --time-scale "$scale" \
  --backend-metrics "$sim_url" --out "$work/bench" --quiet >"$work/driver.log" 2>&1 &
pids+=($!)

cat <<TEXT

LM Warden demo — ${sessions} simulated coding-agent conversations on 4 simulated
RTX A4000 replicas (Qwen3-4B), engine clock ${scale}x faster than real time.

  dashboard        ${warden_url}/
  routing card     ${warden_url}/models/${model}
  tokens/s         ${warden_url}/stats
  warden API       ${warden_url}/v1   (point a client here)
  warden metrics   ${warden_url}/metrics
  simulator        ${sim_url}/metrics
  admin token      ${token}   (paste it on the model page to switch affinity)

Ctrl-C stops everything.

TEXT

# One line from the warden's /metrics: requests, prompt-cache hit %, and the
# median time to first byte (interpolated in the histogram's buckets).
summary() {
  curl -sf --max-time 2 "$warden_url/metrics" | awk -v scale="$scale" '
    /^lmwarden_requests_total\{/ { requests += $NF }
    /^lmwarden_prompt_tokens_total\{.*source="cached"/ { cached += $NF }
    /^lmwarden_prompt_tokens_total\{.*source="computed"/ { computed += $NF }
    /^lmwarden_time_to_first_byte_seconds_bucket\{/ {
      match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
      n++; bound[n] = (le == "+Inf") ? -1 : le + 0; count[n] = $NF
    }
    END {
      hit = (cached + computed > 0) ? sprintf("%.1f%%", 100 * cached / (cached + computed)) : "-"
      total = count[n]; median = "-"
      if (total > 0) {
        prev_b = 0; prev_c = 0
        for (i = 1; i <= n; i++) {
          if (count[i] >= total / 2) {
            if (bound[i] < 0) { median = sprintf(">%gs", prev_b); break }
            f = (count[i] > prev_c) ? (total / 2 - prev_c) / (count[i] - prev_c) : 0
            median = sprintf("%.2fs (%.2fs simulated)", prev_b + f * (bound[i] - prev_b), scale * (prev_b + f * (bound[i] - prev_b)))
            break
          }
          prev_b = bound[i]; prev_c = count[i]
        }
      }
      printf "requests %d   prompt-cache hit %s   median time to first byte %s\n", requests, hit, median
    }'
}

deadline=$(( ${LMWARDEN_DEMO_SECONDS:-0} > 0 ? $(date +%s) + LMWARDEN_DEMO_SECONDS : 0 ))
while :; do
  sleep 5
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || { echo "demo: a process stopped; logs in $work" >&2; tail -5 "$work"/*.log >&2; exit 1; }
  done
  printf '%s  %s' "$(date +%H:%M:%S)" "$(summary || echo 'warden not answering')"
  echo
  if [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then exit 0; fi
done
