#!/usr/bin/env bash
# `make build-pgo`: the profile-guided lmwarden at build/pgo/src/lmwarden.
#
# 1. Builds an instrumented lmwarden and the benchmark's responder in build/pgo
#    (LMWARDEN_PGO=GENERATE).
# 2. Runs the training load through it (bench/proxy/train.sh: the proxy
#    benchmark's three cases, about 20 s), which writes the counters into
#    build/pgo/pgo-profile.
# 3. Rebuilds lmwarden from them (LMWARDEN_PGO=USE).
#
# The layout and inlining then follow the request path the training ran: on
# the proxy benchmark, about a fifth less user CPU per small request than the
# plain build (docs/performance.md, round 12). Takes about twice as long as
# `make build`. Run as root or with sudo when wrk is missing (it installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

jobs="${JOBS:-2}"
profile_dir="$PWD/build/pgo/pgo-profile"

echo "pgo-build: 1/3 instrumented build (build/pgo)"
cmake --preset pgo -DLMWARDEN_PGO=GENERATE -DLMWARDEN_PGO_PROFILE_DIR="$profile_dir" >/dev/null
cmake --build --preset pgo -j "$jobs" --target lmwarden bench_responder

echo "pgo-build: 2/3 training load"
rm -rf "$profile_dir"
bash bench/proxy/train.sh build/pgo/src/lmwarden build/pgo/bench/bench_responder
if ! find "$profile_dir" -name '*.gcda' -print -quit | grep -q .; then
  echo "pgo-build: the training wrote no profile under $profile_dir" >&2
  exit 1
fi

echo "pgo-build: 3/3 optimised build from the profile"
cmake --preset pgo -DLMWARDEN_PGO=USE -DLMWARDEN_PGO_PROFILE_DIR="$profile_dir" >/dev/null
# ccache might not see the profile each object is built from: compile them all.
CCACHE_DISABLE=1 cmake --build --preset pgo -j "$jobs" --target lmwarden
echo "pgo-build: build/pgo/src/lmwarden"
