# Sourced by scripts/demo.sh and scripts/soak.sh: starts a simulated vLLM
# server and the warden in front of it, both as background children.
#
#   start_fleet NAME DP PORT SEED
#
# Reads $bin, $work, $model and $scale; appends both pids to $pids (which the
# caller's exit trap stops) and sets sim_pid, sim_url, warden_pid, warden_url
# and token (the admin token, random). NAME prefixes error messages.

# Waits for "listening on http://HOST:PORT" in a log and prints the URL.
wait_for_url() {
  local name=$1 log=$2 pid=$3 url
  for _ in $(seq 1 200); do
    if url=$(grep -o 'http://[0-9.]*:[0-9]*' "$log" 2>/dev/null | head -1) && [ -n "$url" ]; then
      echo "$url"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "$name: process exited early:" >&2; cat "$log" >&2; return 1; }
    sleep 0.05
  done
  echo "$name: timed out waiting for $log" >&2
  return 1
}

start_fleet() {
  local name=$1 dp=$2 port=$3 seed=$4
  "$bin" sim --listen 127.0.0.1:0 --dp "$dp" --model "$model" --profile a4000-qwen3-4b \
    --time-scale "$scale" --seed "$seed" >"$work/sim.log" 2>&1 &
  pids+=($!)
  sim_pid=$!
  sim_url=$(wait_for_url "$name" "$work/sim.log" "$sim_pid")

  token=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  cat >"$work/lmwarden.yaml" <<YAML
listen: 127.0.0.1:${port}
admin_token_env: LMWARDEN_ADMIN_TOKEN
models:
  - name: ${model}
    inject_stream_usage: true
    backends:
      - url: ${sim_url}
        data_parallel_size: ${dp}
YAML
  LMWARDEN_ADMIN_TOKEN=$token "$bin" serve --config "$work/lmwarden.yaml" >"$work/warden.log" 2>&1 &
  pids+=($!)
  warden_pid=$!
  warden_url=$(wait_for_url "$name" "$work/warden.log" "$warden_pid")
}
