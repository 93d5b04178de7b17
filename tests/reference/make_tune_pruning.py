#!/usr/bin/python3
"""Replays planted learning curves through Optuna's own pruners and stores
which trial each pruner stops, and at which step, in tune_pruning.json. The
C++ test (tests/tune/pruner_test.cpp) replays the same events through
trainkit's pruners and must stop exactly the same trials at the same steps.

Run with Debian's python3-optuna (3.1): /usr/bin/python3 tests/reference/make_tune_pruning.py
"""
import json
import math
import os

import numpy as np
import optuna

optuna.logging.set_verbosity(optuna.logging.ERROR)


def planted_curves(n_trials, n_steps, seed):
    """Noisy decaying curves with different floors and rates: some trials
    are clearly better, many are close (ties at rung boundaries happen)."""
    rng = np.random.RandomState(seed)
    curves = []
    for _ in range(n_trials):
        floor = rng.uniform(0.1, 1.0)
        rate = rng.uniform(0.05, 0.6)
        noise = rng.uniform(0.0, 0.05)
        c = [floor + math.exp(-rate * s) + noise * rng.randn() for s in range(n_steps)]
        curves.append([round(v, 6) for v in c])
    # one curve with a NaN in the middle, one that is constant
    curves[3][4] = float("nan")
    curves[5] = [0.5] * n_steps
    return curves


def replay(pruner, direction, curves, concurrent):
    """`concurrent` trials run round-robin, one step each in turn; a new one
    starts when one ends (pruned, or after its last step)."""
    study = optuna.create_study(direction=direction, pruner=pruner)
    n_steps = len(curves[0])
    sign = -1.0 if direction == "maximize" else 1.0
    pending = list(range(len(curves)))
    running = []  # [index, trial, next step]
    pruned_at = {}
    events = []
    while pending or running:
        while pending and len(running) < concurrent:
            i = pending.pop(0)
            running.append([i, study.ask(), 0])
        slot = running.pop(0)
        i, trial, step = slot
        value = sign * curves[i][step]
        trial.report(value, step)
        events.append([i, step])
        if trial.should_prune():
            pruned_at[i] = step
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif step + 1 == n_steps:
            study.tell(trial, value)
        else:
            running.append([i, trial, step + 1])
    return events, {str(k): v for k, v in sorted(pruned_at.items())}


def nan_to_none(x):
    return None if isinstance(x, float) and math.isnan(x) else x


def main():
    curves = planted_curves(24, 16, seed=3)
    cases = []
    # (kind, options: keyword arguments of Optuna's pruner and fields of trainkit's)
    configs = [
        ("median", {}),
        ("median", {"n_startup_trials": 3, "n_warmup_steps": 2, "interval_steps": 3}),
        ("median", {"n_min_trials": 4}),
        ("percentile", {"percentile": 25.0, "n_startup_trials": 2}),
        ("asha", {"min_resource": 1, "reduction_factor": 2}),
        ("asha", {"min_resource": 2, "reduction_factor": 3, "min_early_stopping_rate": 1}),
        ("asha", {"min_resource": 1, "reduction_factor": 4, "bootstrap_count": 2}),
        ("asha", {}),  # min_resource estimated ("auto")
    ]
    make = {"median": optuna.pruners.MedianPruner,
            "percentile": optuna.pruners.PercentilePruner,
            "asha": optuna.pruners.SuccessiveHalvingPruner}
    for direction in ("minimize", "maximize"):
        for concurrent in (1, 4):
            for kind, options in configs:
                pruner = make[kind](**options)  # fresh: ASHA caches its estimate
                events, pruned = replay(pruner, direction, curves, concurrent)
                cases.append({"pruner": kind, "options": options, "direction": direction,
                              "concurrent": concurrent, "events": events, "pruned_at": pruned})
    out = {"optuna_version": optuna.__version__,
           "curves": [[nan_to_none(v) for v in c] for c in curves], "cases": cases}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune_pruning.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases")


if __name__ == "__main__":
    main()
