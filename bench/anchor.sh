#!/usr/bin/env bash
# The CPU anchor (run inside the Debian 13 root: scripts/debian13.sh run bash
# bench/anchor.sh): trainkit on LibTorch 2.6 against PyTorch 2.6 from Python in
# its four fastest configurations, 1 thread, the runs interleaved twice. Prints
# each result and the ratio of trainkit's steps/s to the fastest Python way.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
cmake --preset d13-bench >/dev/null
cmake --build --preset d13-bench -j "$(nproc)" --target bench_trainer >/dev/null
results=$(mktemp)
for _ in 1 2; do
  build/d13-bench/bench/bench_trainer --anchor | tee -a "$results"
  python3 bench/anchor_pytorch.py 1 | tee -a "$results"
done
python3 - "$results" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for model in ("tiny_mlp", "demo_cnn"):
    ours = max(l[f"{model}_steps_per_s"] for l in lines if l["bench"] == "anchor_trainkit")
    theirs = {}
    for l in lines:
        if l["bench"] == "anchor_pytorch" and l["model"] == model and "steps_per_s" in l:
            theirs[l["way"]] = max(theirs.get(l["way"], 0), l["steps_per_s"])
    best = max(theirs, key=theirs.get)
    print(json.dumps({"bench": "anchor_ratio", "model": model, "trainkit_steps_per_s": ours,
                      "fastest_python_way": best, "fastest_python_steps_per_s": theirs[best],
                      "ratio": round(ours / theirs[best], 2)}))
PY
