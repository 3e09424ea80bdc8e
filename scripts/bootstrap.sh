#!/usr/bin/env bash
# Installs what LM Warden needs on Debian 12. Run as root (or with sudo
# available). Idempotent: packages already present are left alone, and apt
# is only called when something is missing (and, for prometheus below, when
# build/tools lacks it, as after `make clean`).
#
#   bootstrap.sh         what building, testing, the benchmarks and the demo need
#   bootstrap.sh build   what building, installing and the demo need: no test
#                        servers (Redis, nginx), browser, fuzzing or benchmark tools
set -euo pipefail

mode="${1:-all}"
case "$mode" in
  all | build) ;;
  *) echo "usage: $0 [build]" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost1.81-dev            # Asio + Beast (header-only parts)
  libsimdjson-dev             # request body scanning (on-demand)
  libxxhash-dev               # hashing a conversation's opening (XXH3, header-only)
  nlohmann-json3-dev          # JSON built by the control plane and simulator
  libyaml-cpp-dev             # configuration
  libspdlog-dev libfmt-dev    # logging and formatting
  libcli11-dev                # command line
  libjemalloc-dev             # the optimised binary's memory allocator
  libhiredis-dev              # shared homes: the Redis client (src/homes)
  libssl-dev                  # shared homes: Redis over TLS (src/homes)
  libgtest-dev libgmock-dev   # unit and integration tests (built with the release preset too)
  curl                        # used by the demo and by integration scripts
)
test_packages=(
  redis-server                # shared homes' tests (a real Redis on 127.0.0.1)
  openssl                     # shared homes' TLS tests: their certificates
  libbenchmark-dev            # micro-benchmarks
  clang libclang-rt-14-dev    # fuzz targets: clang and the libFuzzer runtime
  clang-format                # make format
  python3                     # the proxy benchmark's scripts and their tests
  python3-yaml                # the alert rules' test (packaging/prometheus)
  nginx-light wrk             # the proxy benchmark (make bench-proxy) and its test
  chromium                    # headless browser for the dashboard's browser tests
)
[ "$mode" = build ] || packages+=("${test_packages[@]}")

missing=()
# Node.js and npm build the dashboard's vendored files and run its browser
# tests. A Node.js from another source (with npm bundled) is kept as it is:
# Debian's npm package would conflict with it.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "bootstrap: all packages present"
fi

# playwright-core (below) runs on Node.js 20 or later; Debian 12's own is 18.
# Said here; the browser tests then fail with the same words (tests/CMakeLists.txt),
# and what needs no browser (the other tests, fuzzing, formatting) still runs.
if [ "$mode" = all ]; then
  node_major="$(node -p 'process.versions.node.split(".")[0]')"
  if [ "$node_major" -lt 20 ]; then
    echo "bootstrap: warning: Node.js $(node --version) is here; the dashboard's browser tests" \
      "need 20 or later (playwright-core asks for it): install Node.js 20 or later for them" >&2
  fi
fi

# The dashboard's npm packages (uPlot, embedded at build time; playwright-core,
# which drives Debian's /usr/bin/chromium and never downloads a browser).
# Installed when ui/node_modules is missing or older than the lock file.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$root/ui/node_modules/.package-lock.json" ] ||
   [ "$root/ui/package-lock.json" -nt "$root/ui/node_modules/.package-lock.json" ]; then
  echo "bootstrap: installing the dashboard's npm packages (ui/)"
  (cd "$root/ui" && npm ci --no-audit --no-fund --loglevel=error)
else
  echo "bootstrap: dashboard npm packages present"
fi

# Prometheus and promtool, its checker, which parse, unit-test and evaluate
# the alert rules (packaging/prometheus) on a live warden in `make test`:
# unpacked from Debian's prometheus package into build/tools, without
# installing the package (so no service is set up or started). Those on the
# PATH are used instead.
have_tool() { command -v "$1" >/dev/null 2>&1 || [ -x "$root/build/tools/$1" ]; }
if [ "$mode" = build ]; then
  :
elif have_tool promtool && have_tool prometheus; then
  echo "bootstrap: prometheus and promtool present"
else
  echo "bootstrap: unpacking prometheus and promtool from Debian's prometheus package into build/tools"
  download="$(mktemp -d)"
  trap 'rm -rf "$download"' EXIT
  fetch() { (cd "$download" && apt-get download -qq -o APT::Sandbox::User=root prometheus); }
  if ! fetch; then
    # No package lists yet (every other package was present): read them once.
    "${sudo_cmd[@]}" apt-get update -qq
    fetch
  fi
  dpkg-deb --fsys-tarfile "$download"/prometheus_*.deb |
    tar -x -C "$download" ./usr/bin/promtool ./usr/bin/prometheus
  mkdir -p "$root/build/tools"
  for tool in promtool prometheus; do
    have_tool "$tool" || install -m 0755 "$download/usr/bin/$tool" "$root/build/tools/$tool"
  done
  rm -rf "$download"
fi
