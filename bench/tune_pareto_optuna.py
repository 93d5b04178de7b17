#!/usr/bin/env python3
"""Optuna's side of bench/tune_pareto.cpp: ZDT1, ZDT2 and ZDT3 (30 variables,
two minimised objectives) with Optuna's random search, NSGA-II (its
defaults: population 50) and multi-objective TPE (TPESampler's defaults),
S seeds of N trials each; per trial the hypervolume gap (reference point
(1.1, 11); the true front sampled at 10001 points, as the C++ side), in the
JSON format bench/tune_compare.py reads.

  /usr/bin/python3 bench/tune_pareto_optuna.py --seeds 10 --trials 200 --json optuna.json

--first-seed K runs seeds K .. K+S-1, to add seeds to an earlier run
(bench/tune_compare.py pools the files).
"""
import argparse
import json
import math
import sys
import time
import warnings

import optuna

VARIABLES = 30
REFERENCE = (1.1, 11.0)


def zdt_h(name, r):
    if name == "zdt1":
        return 1 - math.sqrt(r)
    if name == "zdt2":
        return 1 - r * r
    return 1 - math.sqrt(r) - r * math.sin(10 * math.pi * r)


def zdt(name, x):
    g = 1 + 9 * sum(x[1:]) / (len(x) - 1)
    return x[0], g * zdt_h(name, x[0] / g)


def hypervolume(points):
    """Two objectives, both minimised: the area dominated inside the reference box."""
    inside = sorted(p for p in points if p[0] < REFERENCE[0] and p[1] < REFERENCE[1])
    area, ceiling = 0.0, REFERENCE[1]
    for f1, f2 in inside:
        if f2 < ceiling:
            area += (REFERENCE[0] - f1) * (ceiling - f2)
            ceiling = f2
    return area


def make_sampler(name, seed):
    if name == "optuna_random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "optuna_nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "optuna_motpe":
        return optuna.samplers.TPESampler(seed=seed)
    sys.exit(f"unknown sampler {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--functions", default="zdt1,zdt2,zdt3")
    ap.add_argument("--samplers", default="optuna_random,optuna_nsga2,optuna_motpe")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    out = {"source": "optuna " + optuna.__version__, "seeds": args.seeds,
           "first_seed": args.first_seed, "trials": args.trials, "results": {}}
    for fname in args.functions.split(","):
        best = hypervolume([(i / 10000, zdt_h(fname, i / 10000)) for i in range(10001)])
        per = out["results"].setdefault(fname, {"optimum": 0.0})
        for sname in args.samplers.split(","):
            curves, overheads = [], []
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                objective_s = 0.0

                def objective(trial):
                    nonlocal objective_s
                    x = [trial.suggest_float(f"x{i}", 0, 1) for i in range(VARIABLES)]
                    t0 = time.perf_counter()
                    f = zdt(fname, x)
                    objective_s += time.perf_counter() - t0
                    return f

                study = optuna.create_study(directions=["minimize", "minimize"],
                                            sampler=make_sampler(sname, seed))
                t0 = time.perf_counter()
                study.optimize(objective, n_trials=args.trials)
                overheads.append((time.perf_counter() - t0 - objective_s) / args.trials)
                so_far, curve = [], []
                for t in sorted(study.trials, key=lambda t: t.number):
                    if t.values is not None:
                        so_far.append(tuple(t.values))
                    curve.append(best - hypervolume(so_far))
                curves.append(curve)
            per[sname] = {"best_so_far": curves,
                          "overhead_ms_per_trial": 1e3 * sum(overheads) / len(overheads)}
            last = sorted(c[-1] for c in curves)
            print(f"# {fname} {sname}: gap after {args.trials} trials, median {last[len(last) // 2]:.4g} "
                  f"(front {best:.4f}); {per[sname]['overhead_ms_per_trial']:.2f} ms per trial",
                  file=sys.stderr, flush=True)
    with open(args.json, "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
