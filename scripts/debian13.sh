#!/usr/bin/env bash
# A Debian 13 (trixie) root with LibTorch 2.6, PyTorch 2.6, GCC 14 and Clang,
# built by debootstrap and kept outside the clone (like apt's own cache), so
# the test command can build and test trainkit on LibTorch 2.x without
# touching the host's apt sources.
#   scripts/debian13.sh root          make (or reuse) the root; print its path
#   scripts/debian13.sh run CMD...    run CMD in the root, the repository at /src
# The root is keyed by its package list: a change to the list builds a new one.
set -euo pipefail
cd "$(dirname "$0")/.."

# Packages of the root and why: libtorch-dev/python3-torch are the LibTorch 2.x
# under test and the Python anchor of the benchmarks (torch.compile's C++
# backend needs python3-dev and python3-setuptools); the rest mirror the
# host's build dependencies (README.md; make runs the quick start's default
# generator), with Clang (+ its OpenMP runtime) and chromium/git for the
# browser and FetchContent tests, and trainkit::tune's
# storage libraries (its PostgreSQL server tests run on the host only), and
# Optuna 4 (with SciPy for its GPSampler), the anchor of the search benchmarks;
# libclang-rt-19-dev: libFuzzer and the sanitizer runtimes for the fuzz targets;
# libopenblas0-openmp: LibTorch's matrix products, as on the host (without it
# --no-install-recommends leaves the reference BLAS: an epoch of the GPT
# example took 11.2 s in fp32 instead of 0.9 s).
ROOT_PACKAGES=(g++ make clang libclang-rt-19-dev libomp-dev cmake ninja-build libtorch-dev python3-torch
               python3-dev python3-setuptools
               doctest-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libgloo-dev
               libxml2-dev libpng-dev pkgconf chromium git ca-certificates
               libsqlite3-dev libpq-dev python3-optuna python3-scipy
               postgresql python3-psycopg2 python3-plotly libopenblas0-openmp)
SUITE=trixie
MIRROR=${TRAINKIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${TRAINKIT_CACHE_DIR:-/var/cache/trainkit}

root_path() {
  local key
  key=$(printf '%s\n' "$SUITE" "${ROOT_PACKAGES[@]}" | sha256sum | cut -c1-12)
  echo "$CACHE/debian13-$key"
}

make_root() {
  local root; root=$(root_path)
  [ -e "$root/.complete" ] && { echo "$root"; return 0; }
  [ "$(id -u)" -eq 0 ] || { echo "trainkit: building the Debian 13 root needs root" >&2; exit 1; }
  command -v debootstrap >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
  }
  mkdir -p "$CACHE"
  # Build beside the final path and rename: an interrupted build is never reused.
  local tmp="$root.partial"
  rm -rf "$tmp"
  echo "trainkit: building the Debian 13 root in $root (a few minutes, once)" >&2
  local start=$SECONDS
  # debootstrap lays the base; apt inside the root resolves the packages
  # (debootstrap's own resolver ignores alternatives such as dbus-session-bus).
  { debootstrap --variant=minbase "$SUITE" "$tmp" "$MIRROR" &&
    in_root "$tmp" "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends ${ROOT_PACKAGES[*]} && apt-get clean"; } >"$CACHE/debootstrap.log" 2>&1 ||
    { tail -20 "$CACHE/debootstrap.log" >&2; echo "trainkit: see $CACHE/debootstrap.log" >&2; exit 1; }
  touch "$tmp/.complete"
  mv "$tmp" "$root"
  # Older roots of other package lists are superseded.
  find "$CACHE" -maxdepth 1 -name 'debian13-*' ! -name "$(basename "$root")" -exec rm -rf {} +
  echo "trainkit: Debian 13 root ready in $((SECONDS - start)) s" >&2
  echo "$root"
}

# in_root ROOT CMD: run CMD in ROOT, the repository at /src, the host's CUDA
# toolkit (headers and nvcc, for the cuda-compile preset) at /usr/local/cuda.
in_root() {
  local cuda=${CUDA_HOME:-/usr/local/cuda}
  # A private mount namespace: the bind mounts vanish with the command.
  unshare --mount --propagation private -- bash -euc '
    root=$1 src=$2 cuda=$3; shift 3
    mkdir -p "$root/src" "$root/usr/local/cuda"
    mount --bind "$src" "$root/src"
    mount --rbind /dev "$root/dev"
    mount -t proc proc "$root/proc"
    mount -t tmpfs tmpfs "$root/tmp"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    # the host name resolves inside as outside (torchrun hands it to its ranks);
    # a fresh debootstrap root has no /etc/hosts to mount over
    [ -e "$root/etc/hosts" ] || : >"$root/etc/hosts"
    mount --bind -o ro /etc/hosts "$root/etc/hosts"
    if [ -d "$cuda/include" ]; then mount --bind -o ro "$cuda" "$root/usr/local/cuda"; fi
    exec chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin \
      LANG=C.UTF-8 CI="${CI:-}" TERM=dumb bash -c "cd /src && $*"
  ' _ "$1" "$PWD" "$cuda" "${@:2}"
}

case "${1:-}" in
  root) make_root ;;
  run) shift; root=$(make_root); in_root "$root" "$@" ;;
  *) echo "usage: scripts/debian13.sh {root|run CMD...}" >&2; exit 2 ;;
esac
