#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (a separate CMake project in
# build/fuzz; the main build stays on g++) and runs each for a while.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]    (default 300 s, all targets)
#   make fuzz          300 s per target
#   make fuzz-smoke    10 s per target (also part of make test)
#
# Each target fuzzes a fresh copy of its seeds (fuzz/corpus/<target>, plus
# fuzz/regressions/<target> when present) under build/fuzz/run/<target>, with
# fuzz/<target>.dict as dictionary when there is one; the committed corpus is
# never written. Prints the executions each target ran and
# fails on the first crash, sanitizer report, leak or timeout, with the
# reproducer saved under build/fuzz/artifacts/<target>/.
# Environment: JOBS (build parallelism, default 2), CXX_FUZZ (default clang++),
# SEED (libFuzzer's -seed: 0, the default, draws one per run; any other value
# starts each target's mutations the same way every run: make test and make
# fuzz-smoke use 1, so that they try much the same inputs wherever they run).
set -euo pipefail

seconds="${1:-300}"
shift || true
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2
  exit 2
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build/fuzz"
jobs="${JOBS:-2}"
cxx="${CXX_FUZZ:-clang++}"
seed="${SEED:-0}"
if ! [[ "$seed" =~ ^[0-9]{1,10}$ ]] || ((10#$seed > 4294967295)); then
  echo "fuzz: SEED must be a whole number from 0 to 4294967295, not '$seed'" >&2
  exit 2
fi
seed=$((10#$seed))

all_targets=(prometheus usage_tap identity config request_head)
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")

# Longest input per target (0 = libFuzzer's choice: the largest seed, at least 4 KB).
declare -A max_len=([prometheus]=0 [usage_tap]=4096 [identity]=8192 [config]=8192 [request_head]=8192)

for t in "${targets[@]}"; do
  [[ -v "max_len[$t]" ]] || { echo "fuzz: unknown target '$t' (${all_targets[*]})" >&2; exit 2; }
done

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found; run 'make bootstrap' (packages clang, libclang-rt-14-dev)" >&2
  exit 1
fi

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
fi
echo "fuzz: building ${targets[*]/%/_fuzz} (clang, -j $jobs)"
mkdir -p "$build"
if ! cmake --build "$build" -j "$jobs" --target "${targets[@]/%/_fuzz}" >"$build/build.log" 2>&1; then
  tail -n 60 "$build/build.log" >&2
  echo "fuzz: build failed (full log: build/fuzz/build.log)" >&2
  exit 1
fi

status=0
summary=()
for t in "${targets[@]}"; do
  run="$build/run/$t"
  artifacts="$build/artifacts/$t"
  rm -rf "$run" "$artifacts"
  mkdir -p "$run/corpus" "$artifacts"
  cp -R "$root/fuzz/corpus/$t/." "$run/corpus/"
  seeds=("$run/corpus")
  if [ -d "$root/fuzz/regressions/$t" ]; then
    mkdir -p "$run/regressions"
    cp -R "$root/fuzz/regressions/$t/." "$run/regressions/"
    seeds+=("$run/regressions")
  fi
  extra=()
  [ -f "$root/fuzz/$t.dict" ] && extra+=(-dict="$root/fuzz/$t.dict")
  log="$run/fuzz.log"
  echo "fuzz: $t for ${seconds}s$( ((seed)) && echo ", seed $seed")"
  rc=0
  # The outer timeout only guards against a hung process; libFuzzer stops itself.
  # -reload=0: the corpus directory is read at the start only (its periodic
  # reread, for jobs sharing a directory, made a seeded run differ by timing).
  timeout --kill-after=10 $((seconds + 120)) \
    "$build/${t}_fuzz" -max_total_time="$seconds" -max_len="${max_len[$t]}" -timeout=10 \
      -rss_limit_mb=2048 -seed="$seed" -reload=0 -print_final_stats=1 -artifact_prefix="$artifacts/" \
      "${extra[@]}" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc); last lines of $log:" >&2
    tail -n 40 "$log" >&2
    summary+=("$(printf '%-12s FAILED (exit %s), reproducer in %s' "$t" "$rc" "${artifacts#"$root"/}")")
    status=1
    break
  fi
  summary+=("$(printf '%-12s %10s executions in %ss, corpus %s inputs' "$t" "${execs:-?}" \
    "$seconds" "$(find "$run/corpus" -type f | wc -l)")")
done

echo "fuzz: results"
printf '  %s\n' "${summary[@]}"
exit "$status"
