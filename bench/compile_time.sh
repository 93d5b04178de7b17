#!/usr/bin/env bash
# Compile time of one TU with trainkit and one Trainer vs the same loop by
# hand on <torch/torch.h>: same compiler and flags, best of 3 each.
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=${CXX:-c++}
FLAGS=(-std=gnu++20 -O2 -fopenmp -D_GLIBCXX_USE_CXX11_ABI=1 -isystem /usr/include/torch/csrc/api/include
       -Iinclude -c -o /dev/null)
best() {
  local best=999999 t0 t1
  for _ in 1 2 3; do
    t0=$(date +%s.%N)
    # inside $(...) a failure does not stop the script by itself: say so, or a
    # missing <torch/torch.h> times two failed compiles as a ratio of 1.0
    "$CXX" "${FLAGS[@]}" "$1" || { echo "compile_time: $1 did not compile" >&2; exit 1; }
    t1=$(date +%s.%N)
    best=$(awk -v a="$t0" -v b="$t1" -v m="$best" 'BEGIN { d = b - a; print (d < m) ? d : m }')
  done
  echo "$best"
}
hand=$(best bench/compile/by_hand.cpp)
tk=$(best bench/compile/with_trainkit.cpp)
awk -v h="$hand" -v t="$tk" 'BEGIN {
  printf "{\"bench\": \"compile_time\", \"by_hand_s\": %.2f, \"with_trainkit_s\": %.2f, \"ratio\": %.3f}\n", h, t, t / h }'
