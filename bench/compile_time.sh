#!/usr/bin/env bash
# Compile time of one TU with trainkit and one Trainer vs the same loop by
# hand on <torch/torch.h>: same compiler and flags, best of 3 each. The
# trainkit TU is timed header-only (the default) and with
# TRAINKIT_SEPARATE_COMPILATION, where the library's non-template code is
# compiled once, in the file that includes <trainkit/src.hpp> (timed too:
# a build compiles it once, not per file that trains). The last case adds a
# second model type (two inputs, a struct batch) to the trainkit TU.
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=${CXX:-c++}
FLAGS=(-std=gnu++20 -O2 -fopenmp -D_GLIBCXX_USE_CXX11_ABI=1 -isystem /usr/include/torch/csrc/api/include
       -Iinclude -c -o /dev/null)
SEPARATE=-DTRAINKIT_SEPARATE_COMPILATION
src_tu=$(mktemp --suffix=.cpp)
trap 'rm -f "$src_tu"' EXIT
echo '#include <trainkit/src.hpp>' > "$src_tu"
best() {
  local best=999999 t0 t1
  for _ in 1 2 3; do
    t0=$(date +%s.%N)
    # inside $(...) a failure does not stop the script by itself: say so, or a
    # missing <torch/torch.h> times two failed compiles as a ratio of 1.0
    "$CXX" "${FLAGS[@]}" "$@" || { echo "compile_time: $* did not compile" >&2; exit 1; }
    t1=$(date +%s.%N)
    best=$(awk -v a="$t0" -v b="$t1" -v m="$best" 'BEGIN { d = b - a; print (d < m) ? d : m }')
  done
  echo "$best"
}
hand=$(best bench/compile/by_hand.cpp)
tk=$(best bench/compile/with_trainkit.cpp)
sep=$(best $SEPARATE bench/compile/with_trainkit.cpp)
src=$(best $SEPARATE "$src_tu")
two=$(best -DTRAINKIT_BENCH_SECOND_MODEL bench/compile/with_trainkit.cpp)
awk -v h="$hand" -v t="$tk" -v s="$sep" -v c="$src" -v m="$two" 'BEGIN {
  printf "{\"bench\": \"compile_time\", \"by_hand_s\": %.2f, \"with_trainkit_s\": %.2f, \"ratio\": %.3f, ", h, t, t / h
  printf "\"separate_s\": %.2f, \"ratio_separate\": %.3f, \"src_hpp_once_s\": %.2f, ", s, s / h, c
  printf "\"second_model_s\": %.2f, \"second_model_added_s\": %.2f}\n", m, m - t }'
