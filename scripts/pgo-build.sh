#!/usr/bin/env bash
# `make build-pgo`: the profile-guided lmwarden at build/pgo/src/lmwarden.
#
# 1. Builds an instrumented lmwarden and the benchmark's responder in build/pgo
#    (LMWARDEN_PGO=GENERATE).
# 2. Runs the training load through it (bench/proxy/train.sh: the proxy
#    benchmark's four cases, about 25 s), which writes the counters into
#    build/pgo/pgo-profile.
# 3. Rebuilds lmwarden from them (LMWARDEN_PGO=USE).
#
# The layout and inlining then follow the request path the training ran: on
# the proxy benchmark's small requests, 15 % fewer instructions and 13 % less
# user CPU than the plain build (docs/performance-history.md, round 12).
# Takes about twice as long as `make build`. Run as root or with sudo when
# wrk is missing (it installs it). Run it on a quiet machine: the training
# says how much of a CPU other work took beside it (build/pgo/pgo-training.txt,
# named in bench-proxy's report) and warns from 25 %.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs="${JOBS:-2}"
profile_dir="$PWD/build/pgo/pgo-profile"

# Nothing to do when the last run's optimised build was made from the same
# inputs: a digest is kept beside it of every source, build and training file
# (tracked or new, as they are now on disk; not the benchmark's report
# scripts), of the compiler's version and of the installed versions of the
# libraries compiled in, so that an upgrade of either trains again.
# PGO_RETRAIN=1 trains again anyway. Outside a git checkout, every run trains.
stamp=build/pgo/pgo-sources.sha256
toolchain() {
  local compiler
  compiler="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/pgo/CMakeCache.txt 2>/dev/null)"
  "${compiler:-${CXX:-c++}}" --version 2>&1 | head -n 1
  dpkg-query -W -f='${Package} ${Version}\n' libstdc++-12-dev libc6-dev libboost1.81-dev \
    libsimdjson-dev libjemalloc-dev libspdlog-dev libfmt-dev libyaml-cpp-dev nlohmann-json3-dev \
    libcli11-dev libxxhash-dev libhiredis-dev libssl-dev 2>/dev/null || true
}
files_digest() {
  local paths=(src cmake ui/web ui/package-lock.json CMakeLists.txt CMakePresets.json
               scripts/pgo-build.sh bench/CMakeLists.txt bench/proxy/train.sh bench/proxy/common.sh
               bench/proxy/prepare_cases.py bench/proxy/wrk.lua bench/proxy/responder.cpp)
  { git ls-files -z -- "${paths[@]}"; git ls-files -z --others --exclude-standard -- "${paths[@]}"; } |
    sort -z | { xargs -0 sha256sum 2>/dev/null || true; } | sha256sum | cut -d' ' -f1
}
sources_digest() {
  { echo "$1"; toolchain; } | sha256sum | cut -d' ' -f1
}
digest="" files=""
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files="$(files_digest)"
  digest="$(sources_digest "$files")"
fi
if [ "${PGO_RETRAIN:-0}" != 1 ] && [ -n "$digest" ] && [ -x build/pgo/src/lmwarden ] &&
   [ "$(cat "$stamp" 2>/dev/null)" = "$digest" ]; then
  other="$(cat build/pgo/pgo-training.txt 2>/dev/null || true)"
  if [[ $other =~ ^[0-9]+$ ]] && [ "$other" -ge 25 ]; then
    echo "pgo-build: build/pgo/src/lmwarden is current, but other work took $other% of a CPU" \
         "while its profile was made (PGO_RETRAIN=1 on a quiet machine to train again)"
  else
    echo "pgo-build: build/pgo/src/lmwarden is current (PGO_RETRAIN=1 to train again)"
  fi
  exit 0
fi
rm -f "$stamp"

echo "pgo-build: 1/3 instrumented build (build/pgo)"
cmake --preset pgo -DLMWARDEN_PGO=GENERATE -DLMWARDEN_PGO_PROFILE_DIR="$profile_dir" >/dev/null
cmake --build --preset pgo -j "$jobs" --target lmwarden bench_responder

echo "pgo-build: 2/3 training load"
rm -rf "$profile_dir" build/pgo/pgo-training.txt
PGO_TRAIN_REPORT=build/pgo/pgo-training.txt \
  bash bench/proxy/train.sh build/pgo/src/lmwarden build/pgo/bench/bench_responder
if ! find "$profile_dir" -name '*.gcda' -print -quit | grep -q .; then
  echo "pgo-build: the training wrote no profile under $profile_dir" >&2
  exit 1
fi

# The counters fit the sources they were made from: a source edited since
# step 1 would stop the rebuild on GCC's coverage-mismatch errors, file by file.
# An object step 1 compiled while its source was being edited can be newer
# than the edit, and the next run's step 1 would keep it: the instrumented
# objects go, so that the next run compiles them all from the sources then.
if [ -n "$files" ] && [ "$(files_digest)" != "$files" ]; then
  cmake --build --preset pgo --target clean >/dev/null
  echo "pgo-build: sources changed while the profile was being made, so it no longer fits them;" \
       "run make build-pgo again" >&2
  exit 1
fi

echo "pgo-build: 3/3 optimised build from the profile"
cmake --preset pgo -DLMWARDEN_PGO=USE -DLMWARDEN_PGO_PROFILE_DIR="$profile_dir" >/dev/null
# ccache might not see the profile each object is built from: compile them all.
CCACHE_DISABLE=1 cmake --build --preset pgo -j "$jobs" --target lmwarden
[ -z "$digest" ] || echo "$digest" >"$stamp"
echo "pgo-build: build/pgo/src/lmwarden"
