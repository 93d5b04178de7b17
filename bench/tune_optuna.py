#!/usr/bin/env python3
"""Optuna's samplers on the functions of bench_tune_samplers (Branin,
Hartmann-6, Rosenbrock-10, the conditional space), same budgets and seeds,
same JSON: the per-seed best-so-far curves that bench/tune_compare.py reads.
optuna_tpe_multivariate and optuna_tpe_group: TPESampler(multivariate=True),
without and with group=True.

  /usr/bin/python3 bench/tune_optuna.py --seeds 20 --trials 100 --json optuna.json

--workers N --objective-ms M: N threads share each study (optimize's n_jobs)
and each objective call sleeps M ms, as bench_tune_samplers' options;
optuna_tpe_liar is TPESampler(constant_liar=True).
"""
import argparse
import json
import math
import sys
import time
import warnings

import optuna

# Same definitions, bounds and optima as bench/tune_samplers.cpp.
HARTMANN_ALPHA = [1.0, 1.2, 3.0, 3.2]
HARTMANN_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
              [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
HARTMANN_P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
              [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]


def branin(x):
    a, b, c = 1.0, 5.1 / (4 * math.pi ** 2), 5 / math.pi
    r, s, t = 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x[1] - b * x[0] ** 2 + c * x[0] - r) ** 2 + s * (1 - t) * math.cos(x[0]) + s


def hartmann6(x):
    total = 0.0
    for i in range(4):
        inner = sum(HARTMANN_A[i][j] * (x[j] - 1e-4 * HARTMANN_P[i][j]) ** 2 for j in range(6))
        total += HARTMANN_ALPHA[i] * math.exp(-inner)
    return -total


def rosenbrock(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def conditional(trial):
    """bench/tune_samplers.cpp's conditional space, suggested the same way."""
    branch = trial.suggest_categorical("branch", ["branin", "hartmann", "quadratic"])
    if branch == "branin":
        return branin([trial.suggest_float("branin_x0", -5, 10), trial.suggest_float("branin_x1", 0, 15)])
    if branch == "hartmann":
        return hartmann6([trial.suggest_float(f"hartmann_x{j}", 0, 1) for j in range(6)]) + 4
    n = trial.suggest_int("quadratic_n", 1, 32, log=True)
    lr = trial.suggest_float("quadratic_lr", 1e-5, 1, log=True)
    return (math.log10(lr) + 3) ** 2 + (math.log2(n) - 3) ** 2 / 4 + 2


# Optima to double precision: a rounded one puts a floor under the regret
# (0.397887 under Branin's at 3.6e-7, which the GP reaches).
FUNCTIONS = {  # name: (function, bounds per dimension, optimum)
    "branin": (branin, [(-5.0, 10.0), (0.0, 15.0)], 0.39788735772973816),
    "hartmann6": (hartmann6, [(0.0, 1.0)] * 6, -3.3223680114155147),
    "rosenbrock10": (rosenbrock, [(-2.048, 2.048)] * 10, 0.0),
    "conditional": (None, [], 0.39788735772973816),  # define-by-run: conditional(trial)
}


def make_sampler(name, seed):
    if name == "optuna_tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name in ("optuna_tpe_multivariate", "optuna_tpe_group"):
        return optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                          group=name == "optuna_tpe_group")
    if name == "optuna_tpe_liar":
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True)
    if name == "optuna_random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "optuna_gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "optuna_qmc":  # scrambled Halton, Optuna's default QMC (needs SciPy)
        return optuna.samplers.QMCSampler(qmc_type="halton", scramble=True, seed=seed)
    raise SystemExit(f"unknown sampler {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--functions", default=",".join(FUNCTIONS))
    ap.add_argument("--samplers", default=None,
                    help="comma-separated; default: optuna_tpe, optuna_random, and optuna_gp "
                    "where this Optuna has GPSampler (4.x)")
    ap.add_argument("--json", required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--objective-ms", type=float, default=0.0)
    args = ap.parse_args()
    samplers = args.samplers.split(",") if args.samplers else (
        ["optuna_tpe", "optuna_random"] +
        (["optuna_gp"] if hasattr(optuna.samplers, "GPSampler") else []))
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # not multivariate's "sampled independently"
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)

    out = {"source": "optuna " + optuna.__version__, "seeds": args.seeds,
           "trials": args.trials, "workers": args.workers, "results": {}}
    for fname in args.functions.split(","):
        f, bounds, optimum = FUNCTIONS[fname]
        names = [f"x{j}" for j in range(len(bounds))]
        per = out["results"].setdefault(fname, {"optimum": optimum})
        for sname in samplers:
            curves, overheads = [], []
            for seed in range(args.seeds):
                objective_s = 0.0

                def objective(trial):
                    nonlocal objective_s
                    t0 = time.perf_counter()
                    if f is None:
                        v = conditional(trial)
                    else:
                        x = [trial.suggest_float(n, lo, hi) for n, (lo, hi) in zip(names, bounds)]
                        t0 = time.perf_counter()
                        v = f(x)
                    if args.objective_ms > 0:
                        time.sleep(args.objective_ms / 1e3)
                    objective_s += time.perf_counter() - t0
                    return v

                study = optuna.create_study(sampler=make_sampler(sname, seed))
                t0 = time.perf_counter()
                study.optimize(objective, n_trials=args.trials, n_jobs=args.workers)
                wall = time.perf_counter() - t0
                overheads.append((wall - objective_s) / args.trials)
                best, curve = math.inf, []
                for t in sorted(study.trials, key=lambda t: t.number):
                    if t.value is not None:
                        best = min(best, t.value)
                    curve.append(best)
                curves.append(curve)
            per[sname] = {"best_so_far": curves,
                          "overhead_ms_per_trial": 1e3 * sum(overheads) / len(overheads)}
            print(f"# {fname} {sname}: {per[sname]['overhead_ms_per_trial']:.2f} ms per trial",
                  file=sys.stderr, flush=True)
    with open(args.json, "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
