# Shared by run.sh (the benchmark) and train.sh (the PGO training load).
# Sourced; defines functions and the cases' paths. Messages name the caller
# by $prog.

# The request path of each case (prepare_cases.py writes their bodies).
declare -A case_path=([small]="/v1/chat/completions" [claude100k]="/v1/messages?beta=true"
                      [sse256]="/v1/chat/completions" [sse256paced]="/v1/chat/completions")

# Stops with a message unless both binaries are built and the fixtures found:
#   require_inputs LMWARDEN RESPONDER FIXTURES HINT
require_inputs() {
  local bin
  for bin in "$1" "$2"; do
    [ -x "$bin" ] || { echo "$prog: $bin not built ($4)" >&2; exit 1; }
  done
  [ -f "$3/clients/claude-code-2.1.332_messages_turn2.json" ] ||
    { echo "$prog: fixtures not found under $3 (set LMWARDEN_FIXTURES)" >&2; exit 1; }
}

# Makes the work directory $work and, on exit, kills and reaps the processes
# whose pids are in $pids and removes $work:
#   start_work NAME
start_work() {
  work="$(mktemp -d "${TMPDIR:-/tmp}/lmwarden-$1.XXXXXX")"
  pids=()
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}

# Installs the Debian packages of the commands that are missing:
#   ensure_commands COMMAND:PACKAGE ...
ensure_commands() {
  local missing=() pair
  for pair in "$@"; do
    local cmd="${pair%%:*}" pkg="${pair#*:}"
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  echo "${prog:-$(basename "$0")}: installing ${missing[*]}"
  local sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Waits for "listening on http://127.0.0.1:PORT" in a log and prints the port:
#   port_from_log LOG NAME
port_from_log() {
  local log="$1" name="$2"
  for _ in $(seq 100); do
    local port
    port="$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$log" 2>/dev/null | grep -oE '[0-9]+$' | head -1 || true)"
    [ -n "$port" ] && { echo "$port"; return; }
    sleep 0.1
  done
  echo "${prog:-$(basename "$0")}: $name did not start:" >&2
  cat "$log" >&2
  exit 1
}

# The warden's configuration: one model, "bench", on the responder:
#   write_warden_config FILE THREADS UPSTREAM_PORT
write_warden_config() {
  cat >"$1" <<YAML
listen: 127.0.0.1:0
threads: $2
models:
  - name: bench
    backends:
      - url: http://127.0.0.1:$3
YAML
}
