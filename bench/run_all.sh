#!/usr/bin/env bash
# Runs every benchmark and prints one JSON line per result (docs/benchmarks.md
# records them). $1: the build folder of the `bench` preset.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/bench}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
echo "# $(uname -m), $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# OMP_NUM_THREADS=$OMP_NUM_THREADS, BLAS: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)"
"$BUILD/bench/bench_optim"
"$BUILD/bench/bench_clip"
"$BUILD/bench/bench_data"
"$BUILD/bench/bench_checkpoint"
"$BUILD/bench/bench_logging"
"$BUILD/bench/bench_memory"
# A model scripted in Python against the same model in C++ (issue 56).
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 examples/scripted_model.py script "$BUILD/glyphnet.pt" >/dev/null
  "$BUILD/bench/bench_scripted" "$BUILD/glyphnet.pt"
fi
"$BUILD/bench/bench_time_to_target" --seeds 5  # issue 54: optimizers by time to a loss
# Data parallel: 2 ranks of 1 thread each over Gloo (rank 0 reports).
bash scripts/launch.sh -n 2 -- "$BUILD/bench/bench_ddp" overlap
one=$(bash scripts/launch.sh -n 1 -- "$BUILD/bench/bench_ddp" scaling); echo "$one"
two=$(bash scripts/launch.sh -n 2 -- "$BUILD/bench/bench_ddp" scaling); echo "$two"
awk -v a="$one" -v b="$two" 'BEGIN {
  match(a, /"samples_per_s": [0-9.]+/); s1 = substr(a, RSTART + 17, RLENGTH - 17)
  match(b, /"samples_per_s": [0-9.]+/); s2 = substr(b, RSTART + 17, RLENGTH - 17)
  printf "{\"bench\": \"ddp_scaling_efficiency\", \"speedup_2_vs_1\": %.2f, \"efficiency\": %.2f}\n", s2 / s1, s2 / s1 / 2 }'
bash scripts/launch.sh -n 2 -- "$BUILD/bench/bench_ddp" zero
# Sharding strategies against DDP and the formulas, on 2 and 4 ranks; as root
# in a network namespace of its own, so the loopback counts their bytes alone.
for n in 2 4; do
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
    unshare -n bash -c "ip link set lo up && bash scripts/launch.sh -n $n -- $BUILD/bench/bench_sharding"
  else
    bash scripts/launch.sh -n "$n" -- "$BUILD/bench/bench_sharding"
  fi
done
trainer_line=$("$BUILD/bench/bench_trainer"); echo "$trainer_line"
"$BUILD/bench/bench_trainer" --pagefaults default
"$BUILD/bench/bench_trainer" --pagefaults keep
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  py_line=$(/usr/bin/python3 bench/mlp_pytorch.py "$OMP_NUM_THREADS"); echo "$py_line"
  /usr/bin/python3 - "$trainer_line" "$py_line" <<'PY'
import json, sys
t, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"bench": "trainer_vs_pytorch_python", "ratio_steps_per_s":
                  round(t["trainer_steps_per_s"] / p["steps_per_s"], 2)}))
PY
else
  echo '# python3-torch not installed: skipping the PyTorch-in-Python baseline'
fi
# Hyperparameter search: regret of the samplers against Optuna's (only where
# trainkit::tune was built, i.e. SQLite3 was found). GP on a smaller budget:
# its per-trial cost (a GP fit, 0.1-0.3 s) makes 20 x 100 take most of an hour.
if [ -x "$BUILD/bench/bench_tune_samplers" ]; then
  "$BUILD/bench/bench_tune_samplers" --seeds 20 --trials 100 --samplers random,halton,tpe,tpe_true_density \
    --json "$BUILD/tune_trainkit.json"
  "$BUILD/bench/bench_tune_samplers" --seeds 10 --trials 50 --samplers gp \
    --json "$BUILD/tune_trainkit_gp.json"
  if /usr/bin/python3 -c 'import optuna' 2>/dev/null; then
    /usr/bin/python3 bench/tune_optuna.py --seeds 20 --trials 100 --json "$BUILD/tune_optuna.json"
    # Markdown tables, as comment lines.
    /usr/bin/python3 bench/tune_compare.py "$BUILD/tune_trainkit.json" \
      "$BUILD/tune_trainkit_gp.json" "$BUILD/tune_optuna.json" | sed 's/^/# /'
  else
    echo '# python3-optuna not installed: skipping the Optuna comparison'
  fi
fi
# Debian's LibTorch layout (the CPU machines): skipped elsewhere.
if [ -d /usr/include/torch/csrc/api/include ]; then bash bench/compile_time.sh; fi
