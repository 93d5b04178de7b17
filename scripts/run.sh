#!/usr/bin/env bash
# One entry point for people and CI (see README.md):
#   scripts/run.sh setup               install every Debian package the demo and the tests use
#   scripts/run.sh demo [demo flags]   install what the demo needs, build it, train it
#   scripts/run.sh test                install what is missing, then the whole suite:
#                                      Debian 13 (LibTorch 2.6): the fast suite with
#                                      Clang, the integration tests with GCC 14, every CUDA path
#                                      compiled, the readers fuzzed; Debian 12 (LibTorch 1.13, GCC 12):
#                                      release and the data tests under TSan
#   scripts/run.sh test-full           all of `test`, then every public header compiled on
#                                      its own and the suite under ASan + UBSan
#   scripts/run.sh gpu                 on a CUDA machine, in minutes: the CUDA tests, the
#                                      demo in fp16 and bf16, the GPU benchmarks against
#                                      PyTorch eager, fused and reduce-overhead
#   scripts/run.sh gpu-full            all of `gpu`, every torch.compile mode and Lightning,
#                                      then the CPU suite and benchmarks on that machine
#   scripts/run.sh tune [tune flags]   a hyperparameter search over the demo CNN
#   scripts/run.sh example NAME [flags]
#                                      build and run examples/NAME.cpp (gpt, glyph_pairs, ...)
#   scripts/run.sh bench               build and run the benchmarks
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages and why: see the dependency table in README.md.
DEMO_PACKAGES=(build-essential cmake ninja-build libtorch-dev libopenblas0-openmp
               nlohmann-json3-dev libcli11-dev zlib1g-dev libgloo-dev)
# libsqlite3-dev and libpq-dev: trainkit::tune's study storages; postgresql: the
# server its PostgreSQL tests start (scripts/postgres.sh); python3-torch:
# PyTorch's own launcher (torchrun) for the launch tests, and interop files;
# python3-optuna, -plotly, -psycopg2: Optuna 3.1 on trainkit's study databases.
TEST_PACKAGES=(doctest-dev clang-format libxml2-dev libpng-dev chromium pkgconf git
               debootstrap libsqlite3-dev libpq-dev postgresql python3-torch
               python3-optuna python3-plotly python3-psycopg2 iproute2
               slurmctld slurmd slurm-client munge)

install_missing() {
  local missing=()
  for p in "$@"; do
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

build() {  # $1 = preset, then optional build arguments
  cmake --preset "$1" >/dev/null && cmake --build --preset "$1" -j "$(nproc)" "${@:2}"
}

# Phase timings, printed as a table at the end of `test`, and when a phase
# fails: then the table says which one, and what ran before it.
TIMINGS=()
COMMAND_START=$SECONDS
timings() {  # the table, with the whole command's line when $1 names it
  [ -n "${1:-}" ] &&
    TIMINGS+=("$(printf '%-44s %5d s' "whole $1 command" $((SECONDS - COMMAND_START)))")
  printf '%s\n' "${TIMINGS[@]}"
}
phase() {  # phase NAME CMD...
  local start=$SECONDS rc=0
  echo "=== trainkit: $1"
  "${@:2}" || rc=$?
  TIMINGS+=("$(printf '%-44s %5d s' "$1" $((SECONDS - start)))")
  if [ $rc -ne 0 ]; then
    TIMINGS[-1]+="  FAILED (exit $rc); the phases after it did not run"
    timings "${WHOLE_COMMAND:-}"
    exit $rc
  fi
}

# headers.self_contained (each public header compiled alone: 20 of the
# Debian 12 phase's 50 minutes on 2 cores) runs in test-full only; the
# headers that reach no LibTorch header are compiled alone here too
# (headers.self_contained_without_libtorch).
test_debian12() {
  phase "Debian 12 release: build + suite" \
    eval 'build d12 && ctest --preset d12 -j "$(nproc)" -E "^headers\.self_contained$"'
  # the threaded data pipeline under ThreadSanitizer
  phase "Debian 12 TSan: data tests" eval 'build tsan && ctest --preset tsan -j "$(nproc)"'
}

# Runs inside the Debian 13 root (scripts/debian13.sh).
test_debian13() {
  # Debian 13's oneDNN miscomputes convolution gradients on some AVX-512
  # CPUs (scripts/check_onednn.py): its AVX2 kernels are right.
  if ! python3 scripts/check_onednn.py; then
    export ONEDNN_MAX_CPU_ISA=AVX2
    echo "trainkit: this machine's oneDNN computes wrong convolution gradients with its" \
         "AVX-512 kernels; the Debian 13 phases run with ONEDNN_MAX_CPU_ISA=AVX2"
    python3 scripts/check_onednn.py || { echo "trainkit: and with AVX2 too" >&2; return 1; }
  fi
  # Twice the cores' jobs in random order: two test processes that share a
  # path, a port or a database fail here (tests/scratch.hpp).
  phase "Debian 13 Clang: build + fast suite (-j 4, random)" \
    eval 'build d13-clang && ctest --preset d13-clang -j 4 --schedule-random'
  # the examples, multi-process and interop tests; the doctest binaries ran above
  phase "Debian 13 GCC 14: build + integration suite" \
    eval 'build d13-gcc && ctest --preset d13-gcc -j "$(nproc)"'
  phase "Debian 13 cuda-compile: objects" build cuda-compile
  # every file reader under libFuzzer + ASan + UBSan, TRAINKIT_FUZZ_SECONDS each
  phase "Debian 13 fuzz: the file readers" \
    eval 'build d13-fuzz && ctest --preset d13-fuzz -j "$(nproc)"'
}

# The LibTorch to build against on a machine without Debian's: a prefix
# given by TRAINKIT_TORCH_PREFIX, else the one inside Python's torch.
torch_prefix() {
  if [ -n "${TRAINKIT_TORCH_PREFIX:-}" ]; then echo "$TRAINKIT_TORCH_PREFIX"; return; fi
  python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || {
    echo "trainkit: no LibTorch: set TRAINKIT_TORCH_PREFIX or install PyTorch" >&2; exit 1; }
}

gpu() {  # gpu [full]
  local full=${1:-} out=${TRAINKIT_RESULTS_DIR:-build/gpu-results} deps=${TRAINKIT_DEPS_DIR:-}
  mkdir -p "$out"; out=$(cd "$out" && pwd)
  local prefix; prefix=$(torch_prefix)
  local paths="$prefix"
  [ -n "$deps" ] && paths="$prefix;$deps;$deps/usr"
  # Each step's line goes to summary.txt as it ends, so a run cut short
  # still says what ran. GPU-only steps first; the CPU-side ones CI also runs last.
  : >"$out/summary.txt"
  record() {  # record NAME LOG CMD...: run, log, and add a summary line
    local start=$SECONDS rc=0
    "${@:3}" >"$out/$2" 2>&1 || rc=$?
    printf '%-36s %-5s %5d s  %s\n' "$1" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" \
      $((SECONDS - start)) "$2" | tee -a "$out/summary.txt"
    return 0
  }
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))' \
    >"$out/torch.txt" 2>&1 || true
  echo "trainkit scripts/run.sh gpu${full:+-full}: $(cat "$out/torch.txt" 2>/dev/null)" |
    tee -a "$out/summary.txt"
  # nvcc builds trainkit::cuda_kernels (the fused batch norm) where it is found.
  local nvcc; nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  record "configure (CUDA LibTorch)" configure.log cmake -S . -B build/gpu -G Ninja \
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$paths" -DTRAINKIT_BUILD_BENCH=ON \
    -DTRAINKIT_VERIFY_HEADERS=OFF -DTRAINKIT_INSTALL=OFF ${nvcc:+"-DCMAKE_CUDA_COMPILER=$nvcc"}
  record "build: test_cuda, test_io, demo, bench_gpu" build.log \
    cmake --build build/gpu -j "$(nproc)" --target test_cuda test_io demo bench_gpu
  record "CUDA tests on the GPU" ctest_cuda.log env TRAINKIT_REQUIRE_CUDA=1 \
    ctest --test-dir build/gpu -L cuda -V --timeout 300 --no-tests=error
  # The wheel's libtorch.so exports its own std::filesystem (decisions 84).
  record "libstdc++ linked before libtorch.so" ctest_link.log \
    ctest --test-dir build/gpu -V -R 'std::filesystem calls bind' --no-tests=error
  local demo=build/gpu/examples/demo
  # the demos' runs stay in the build tree: the results folder holds what the docs cite
  record "demo fp16 (CUDA)" demo_fp16.log \
    "$demo" --precision fp16 --epochs 3 --runs-dir build/gpu/runs/demo_fp16
  record "demo bf16 (CUDA)" demo_bf16.log \
    "$demo" --precision bf16 --epochs 3 --runs-dir build/gpu/runs/demo_bf16
  # The GPU benchmarks against PyTorch on this GPU (docs/benchmarks.md); MFU
  # against the dense fp16/bf16 peak of the H100 and H200 (989 TFLOP/s).
  # max-autotune-no-cudagraphs compiles for minutes per model: gpu-full only.
  local peak=0 ways=eager,fused,reduce-overhead
  grep -qE 'H100|H200' "$out/nvidia-smi.txt" 2>/dev/null && peak=989e12
  [ -n "$full" ] && ways=eager,fused,compile,reduce-overhead,max-autotune,lightning
  record "GPU benchmarks: trainkit" gpu_trainkit.jsonl \
    build/gpu/bench/bench_gpu --device cuda --peak-flops "$peak"
  record "GPU benchmarks: batch-norm layers" gpu_bn_layers.jsonl \
    build/gpu/bench/bench_gpu --device cuda --cases bn_layers
  record "GPU benchmarks: PyTorch ($ways)" gpu_pytorch.jsonl \
    python3 bench/gpu_pytorch.py --device cuda --peak-flops "$peak" --ways "$ways" --profile \
    --cases resnet10,mlp,transformer,loader
  # the GPT against torch.compile's default mode too (issue 33): 1-2 minutes
  record "GPU benchmarks: PyTorch GPT" gpu_pytorch_gpt.jsonl \
    python3 bench/gpu_pytorch.py --device cuda --peak-flops "$peak" --profile --cases gpt \
    --ways "$([ -n "$full" ] && echo "$ways" || echo eager,fused,compile,reduce-overhead)"
  record "GPU benchmarks: table" gpu_table.md \
    python3 bench/gpu_compare.py "$out/gpu_trainkit.jsonl" "$out/gpu_pytorch.jsonl" \
    "$out/gpu_pytorch_gpt.jsonl"
  if [ -n "$full" ]; then
    # The CPU suite as CI runs it (CUDA hidden: its cases compare with CPU
    # references). Packaging and the browser screenshot are CPU-side checks CI
    # runs; two demo ranks cannot share a GPU.
    record "build: the rest" build_rest.log cmake --build build/gpu -j "$(nproc)"
    record "suite, CUDA hidden (as on CI)" ctest.log env CUDA_VISIBLE_DEVICES= \
      ctest --test-dir build/gpu -j 4 --output-on-failure --timeout 300 -LE cuda \
      -E '^package\.|headless browser'
    record "benchmarks" bench.log bash bench/run_all.sh build/gpu
  fi
  {
    grep -h "tests passed\|tests failed\|final:" "$out"/ctest*.log "$out"/demo_*.log 2>/dev/null || true
    cat "$out/gpu_table.md" 2>/dev/null || true
  } | tee -a "$out/summary.txt"
  echo "results: $out (whole run: $SECONDS s)"
  ! grep -q " FAIL " "$out/summary.txt"
}

cmd="${1:-demo}"; shift || true
case "$cmd" in
  setup) install_missing "${DEMO_PACKAGES[@]}" "${TEST_PACKAGES[@]}" ;;
  demo)  install_missing "${DEMO_PACKAGES[@]}"
         build demo --target demo; exec ./build/demo/examples/demo "$@" ;;
  tune)  install_missing "${DEMO_PACKAGES[@]}" libsqlite3-dev
         build demo --target tune; exec ./build/demo/examples/tune "$@" ;;
  example) name="${1:-}"; shift || true
         if [ ! -f "examples/$name.cpp" ]; then
           echo "usage: scripts/run.sh example NAME [flags], NAME one of:" \
                $(basename -s .cpp examples/*.cpp | grep -v '^pch$') >&2
           exit 2
         fi
         install_missing "${DEMO_PACKAGES[@]}"
         build demo --target "$name"
         if [ "$name" = scripted ]; then  # the model comes from Python, and goes back
           install_missing python3-torch
           /usr/bin/python3 examples/scripted_model.py script build/demo/scripted_model.pt
           ./build/demo/examples/scripted --model build/demo/scripted_model.pt \
             --out build/demo/scripted "$@"
           exec /usr/bin/python3 examples/scripted_model.py check build/demo/scripted
         fi
         exec "./build/demo/examples/$name" "$@" ;;
  test|test-full)
         install_missing "${DEMO_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
         WHOLE_COMMAND=$cmd
         phase "Debian 13 root (cached in /var/cache/trainkit)" bash scripts/debian13.sh root
         # its phases print their own table just above, on success or failure
         phase "Debian 13 (the phases above)" \
           bash scripts/debian13.sh run bash scripts/run.sh test-debian13
         test_debian12
         if [ "$cmd" = test-full ]; then
           phase "Debian 12: every public header on its own" \
             ctest --preset d12 -R '^headers\.self_contained$'
           # the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer
           phase "Debian 12 ASan+UBSan: suite" eval 'build asan && ctest --preset asan -j "$(nproc)"'
         fi
         timings "$cmd" ;;
  test-debian13) test_debian13; timings ;;
  gpu)   gpu ;;
  gpu-full) gpu full ;;
  bench) install_missing "${DEMO_PACKAGES[@]}" libsqlite3-dev python3-optuna; build bench; exec bash bench/run_all.sh build/bench ;;
  *) echo "usage: scripts/run.sh {setup|demo|tune|example|test|test-full|gpu|gpu-full|bench} [args]" >&2; exit 2 ;;
esac
