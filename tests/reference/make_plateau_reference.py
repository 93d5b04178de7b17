#!/usr/bin/env python3
"""Reference learning rates for sched::ReduceLROnPlateau, computed by
torch.optim.lr_scheduler.ReduceLROnPlateau on planted metric sequences.

Run with a PyTorch, e.g. the Debian 13 root's: bash scripts/debian13.sh run \
  python3 /src/tests/reference/make_plateau_reference.py
It rewrites plateau.json beside this file.
"""
import json
import math
import pathlib

import torch

HERE = pathlib.Path(__file__).resolve().parent


def sequences():
    """Metric sequences that plateau, improve by less than the threshold,
    recover, go negative and meet a NaN."""
    g = torch.Generator().manual_seed(7)
    noisy = [1.0 / (1 + 0.3 * i) + 0.05 * float(torch.randn(1, generator=g)) for i in range(40)]
    stalls = [1.0, 0.9, 0.9, 0.9, 0.899, 0.9, 0.7, 0.7, 0.7, 0.7, 0.7, 0.65, 0.65, 0.65, 0.65,
              0.65, 0.65, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2]
    rising = [0.1 * i + 0.02 * float(torch.randn(1, generator=g)) for i in range(30)]
    negative = [-2.0 + 0.01 * i for i in range(10)] + [-1.0] * 10 + [-3.0] * 10
    with_nan = [1.0, 0.8, float("nan"), 0.8, 0.8, 0.5, float("nan"), float("nan"), 0.5, 0.5, 0.4]
    return {"noisy": noisy, "stalls": stalls, "rising": rising, "negative": negative,
            "with_nan": with_nan}


CASES = [
    # name, sequence, base lr, options
    ("min_rel", "noisy", 0.1, dict(mode="min", factor=0.5, patience=2, threshold=1e-2)),
    ("min_rel_default", "stalls", 0.1, dict()),
    ("min_rel_cooldown", "stalls", 0.1, dict(factor=0.5, patience=1, cooldown=2, min_lr=0.01)),
    ("min_abs", "stalls", 1.0, dict(factor=0.3, patience=0, threshold=0.05,
                                    threshold_mode="abs", min_lr=0.05)),
    ("max_rel", "rising", 0.2, dict(mode="max", factor=0.7, patience=1, threshold=0.1)),
    ("max_abs_cooldown", "rising", 0.2, dict(mode="max", factor=0.5, patience=0, threshold=0.15,
                                             threshold_mode="abs", cooldown=1)),
    ("min_negative", "negative", 0.1, dict(factor=0.5, patience=3, threshold=0.1)),
    ("max_negative", "negative", 0.1, dict(mode="max", factor=0.5, patience=2, threshold=0.1)),
    ("eps_holds", "stalls", 1e-3, dict(factor=0.9, patience=0, min_lr=9.5e-4, eps=1e-4)),
    ("nan", "with_nan", 0.1, dict(factor=0.5, patience=1)),
]


def main():
    seqs = sequences()
    out = {"cases": []}
    for name, seq, base, opts in CASES:
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=base)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **opts)
        lrs = []
        for m in seqs[seq]:
            sched.step(m)
            lrs.append(opt.param_groups[0]["lr"])
        out["cases"].append({"name": name, "base_lr": base, "options": opts,
                             "metrics": [m if not math.isnan(m) else "nan" for m in seqs[seq]],
                             "lrs": lrs})
    out["generator"] = f"tests/reference/make_plateau_reference.py, torch {torch.__version__}"
    (HERE / "plateau.json").write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
