#!/usr/bin/env bash
# One entry point for people and CI (see README.md):
#   scripts/run.sh demo [demo flags]   install what is missing, build, train the demo
#   scripts/run.sh test                install what is missing, build, run the whole suite
#                                      (release; data tests under ThreadSanitizer; all
#                                      under AddressSanitizer + UBSan)
#   scripts/run.sh bench               build and run the benchmarks
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages and why: see the dependency table in README.md.
PACKAGES=(build-essential cmake ninja-build libtorch-dev libopenblas0-openmp doctest-dev
          nlohmann-json3-dev libcli11-dev clang-format zlib1g-dev libgloo-dev
          libxml2-dev libpng-dev chromium pkgconf)

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "trainkit: missing Debian packages: ${missing[*]}" >&2
    echo "run this script as root, or first: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "trainkit: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {  # $1 = preset
  cmake --preset "$1" >/dev/null
  cmake --build --preset "$1" -j "$(nproc)"
}

cmd="${1:-demo}"; shift || true
case "$cmd" in
  setup) install_missing ;;
  demo)  install_missing; build release; exec ./build/release/examples/demo "$@" ;;
  test)  install_missing
         build release; ctest --preset release -j "$(nproc)" "$@"
         # the threaded data pipeline under ThreadSanitizer
         build tsan; ctest --preset tsan -j "$(nproc)" "$@"
         # the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer
         build asan; ctest --preset asan -j "$(nproc)" "$@" ;;
  bench) install_missing; build bench; exec bash bench/run_all.sh build/bench ;;
  *) echo "usage: scripts/run.sh {setup|demo|test|bench} [args]" >&2; exit 2 ;;
esac
