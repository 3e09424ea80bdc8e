# LM Warden — the two commands an operator needs:
#   make demo   set everything up and run the warden on a simulated vLLM fleet
#   make test   set everything up, build with sanitizers and run every test
.PHONY: all bootstrap bootstrap-build build build-pgo build-dev install test test-tsan fuzz fuzz-smoke demo soak clean format bench-micro bench-proxy

JOBS ?= 2
export CCACHE_DIR ?= $(HOME)/.cache/ccache

all: build

bootstrap:
	@bash scripts/bootstrap.sh

# Only what building, installing and the demo need: no test servers, browser,
# fuzzing or benchmark tools (an operator's `make install` on a GPU box).
bootstrap-build:
	@bash scripts/bootstrap.sh build

# Optimised binary at build/lmwarden.
build: bootstrap-build
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)
	@ln -sf release/src/lmwarden build/lmwarden

# The same, profile-guided (scripts/pgo-build.sh: an instrumented build, a
# training load of about 25 s, a rebuild), at build/lmwarden-pgo; about twice
# the build time, less CPU per request (docs/performance-history.md, round
# 12). Does nothing when the sources, compiler and libraries are those of its
# last build; PGO_RETRAIN=1 trains again.
build-pgo: bootstrap
	@JOBS=$(JOBS) bash scripts/pgo-build.sh
	@ln -sf pgo/src/lmwarden build/lmwarden-pgo

# The binary to $(PREFIX)/bin (/usr/local by default), a configuration to
# start from at /etc/lmwarden/lmwarden.yaml (only where none is) and the
# systemd units (packaging/lmwarden.service and lmwarden.socket); DESTDIR for
# packaging.
install: build
	@bash scripts/install.sh

build-dev: bootstrap
	@cmake --preset dev >/dev/null
	@cmake --build --preset dev -j $(JOBS)

# Unit and integration suites under ASan + UBSan, with the browser tests and
# the benchmark scripts' tests; the optimised binary as
# shipped (tests/release: what only its build does, such as its allocator);
# then the fuzz smoke run.
test: build-dev
	@ctest --preset dev -j $(JOBS)
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS) --target lmwarden
	@LMWARDEN_BINARY=build/release/src/lmwarden python3 -m unittest discover -s tests/release -p '*_test.py'
	@SEED=1 bash scripts/fuzz.sh 10

# The integration suites (every thread of the warden and the simulator at
# work) under ThreadSanitizer, in build/tsan.
TSAN_TARGETS = lmwarden proxy_itests sim_itests e2e_itests bench_itests fault_itests hostile_itests net_itests homes_itests
test-tsan: bootstrap
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan -j $(JOBS) --target $(TSAN_TARGETS)
	@ctest --preset tsan -L integration -j $(JOBS)

# libFuzzer targets of fuzz/ (clang, build/fuzz): 300 s each on a seed drawn
# per run, or 10 s each on seed 1 (much the same inputs every run: a gate, not a hunt).
fuzz: bootstrap
	@bash scripts/fuzz.sh 300

fuzz-smoke: bootstrap
	@SEED=1 bash scripts/fuzz.sh 10

demo: build
	@bash scripts/demo.sh

# Many streaming conversations through the warden for SOAK_SECONDS (default
# 600): fails on any error or a request left in flight; reports the warden's RSS.
soak: build
	@bash scripts/soak.sh

# Benchmarks (docs/performance.md), on the release build. Micro: identity,
# routing, parsers, memory per conversation, the access log's line, the homes
# file (Google Benchmark), JSON in build/bench/micro.json. Proxy: the same load
# direct, through nginx and through lmwarden (the profile-guided build), table
# and build/bench/proxy.json; about 7 minutes after the builds.
bench-micro: bootstrap
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS) --target micro_benchmarks
	@mkdir -p build/bench
	@build/release/bench/micro_benchmarks --benchmark_min_time=0.2 \
	  --benchmark_out=build/bench/micro.json --benchmark_out_format=json

bench-proxy: build-pgo
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS) --target bench_responder
	@bash bench/proxy/run.sh

format: bootstrap
	@git ls-files -z '*.h' '*.cpp' | xargs -0 clang-format -i

clean:
	rm -rf build
