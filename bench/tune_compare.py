#!/usr/bin/env python3
"""Regret tables (markdown) from bench_tune_samplers' and tune_optuna.py's
JSON files: per function and sampler the median regret [quartiles] after 25,
50 and 100 trials, then trainkit TPE and GP against Optuna's TPE and every
sampler against random search, with the ratio of median regrets and one-sided
Mann-Whitney U p-values (normal approximation with tie and continuity
corrections, as scipy.stats.mannwhitneyu(method="asymptotic") computes it;
scipy is not needed).

  /usr/bin/python3 bench/tune_compare.py [--budgets 50,100,200] [--seeds LO-HI] trainkit.json [more.json ...] optuna.json

--seeds LO-HI keeps the runs of seeds LO to HI alone (e.g. to test on fresh
seeds a difference first seen on others).

The multi-objective benchmark (bench_tune_pareto, tune_pareto_optuna.py)
writes the hypervolume gap as its regret: the same tables apply.

Several files may be given (e.g. the GP run on its own budget): they are merged,
trainkit's samplers named tk_<sampler>; a sampler met again (another budget)
is kept as <name>_<seeds>x<trials>, unless its file says "first_seed" above 0
(--first-seed: more seeds of the same run), where its seeds are pooled.
"""
import json
import math
import re
import sys

BUDGETS = (25, 50, 100)


def load(paths):
    merged = {}  # function -> {"optimum": x, sampler: {"best_so_far": [...], ...}}
    for path in paths:
        with open(path) as fh:
            data = json.load(fh)
        prefix = "tk_" if data.get("source") == "trainkit" else ""
        first = data.get("first_seed", 0)
        for fname, per in data["results"].items():
            into = merged.setdefault(fname, {"optimum": per["optimum"]})
            for sname, res in per.items():
                if sname == "optimum":
                    continue
                key = prefix + sname
                res = dict(res, seeds=list(range(first, first + len(res["best_so_far"]))))
                if key in into and first > 0:  # more seeds: pooled
                    old, n_old, n_new = into[key], len(into[key]["best_so_far"]), len(res["best_so_far"])
                    into[key] = {"best_so_far": old["best_so_far"] + res["best_so_far"],
                                 "seeds": old["seeds"] + res["seeds"],
                                 "overhead_ms_per_trial": (old["overhead_ms_per_trial"] * n_old +
                                                           res["overhead_ms_per_trial"] * n_new) /
                                                          (n_old + n_new)}
                    continue
                if key in into:  # the same sampler on another budget: keep both
                    key += f"_{len(res['best_so_far'])}x{len(res['best_so_far'][0])}"
                into[key] = res
    return merged


def regrets(res, optimum, budget):
    """The seeds' regrets after `budget` trials, or None if a run was shorter."""
    curves = res["best_so_far"]
    if any(len(c) < budget for c in curves):
        return None
    return [c[budget - 1] - optimum for c in curves]


def base(name):
    """The sampler's name without a budget suffix (tk_gp_5x100 -> tk_gp)."""
    return re.sub(r"_\d+x\d+$", "", name)


def quantile(v, q):  # numpy's default (linear interpolation)
    v = sorted(v)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def normal_cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2))


def mann_whitney(x, y):
    """One-sided p-values (x stochastically smaller than y, x larger)."""
    n1, n2 = len(x), len(y)
    pooled = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    ranks, ties, i = [0.0] * len(pooled), 0.0, 0
    while i < len(pooled):  # average ranks over runs of equal values
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    r1 = sum(r for r, (_, g) in zip(ranks, pooled) if g == 0)
    u1 = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    mu = n1 * n2 / 2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0, 1.0
    sd = math.sqrt(var)
    return normal_cdf((u1 - mu + 0.5) / sd), 1 - normal_cdf((u1 - mu - 0.5) / sd)


def fmt(v):
    return f"{v:.3g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"


def fmt_p(p):
    return f"{p:.3f}" if p >= 0.001 else "<0.001"


def main():
    global BUDGETS
    args = sys.argv[1:]
    seeds = None
    while args[:1] in (["--budgets"], ["--seeds"]) and len(args) > 1:
        if args[0] == "--budgets":
            BUDGETS = tuple(int(b) for b in args[1].split(","))
        else:
            lo, hi = (int(x) for x in args[1].split("-"))
            seeds = range(lo, hi + 1)
        args = args[2:]
    if not args:
        sys.exit(__doc__)
    data = load(args)
    if seeds is not None:
        for per in data.values():
            for sname, res in per.items():
                if sname != "optimum":
                    res["best_so_far"] = [c for c, k in zip(res["best_so_far"], res["seeds"]) if k in seeds]

    print("| function | sampler | seeds x trials | " + " | ".join(f"regret @{b}" for b in BUDGETS) +
          " | overhead ms/trial |")
    print("|---|---|---|" + "---|" * len(BUDGETS) + "---|")
    order = ["tk_random", "tk_halton", "tk_tpe", "tk_tpe_true_density", "tk_tpe_multivariate", "tk_tpe_group",
             "tk_gp", "tk_gp_no_liar", "tk_gp_liar", "tk_gp_group", "optuna_random", "optuna_tpe", "optuna_tpe_multivariate", "optuna_tpe_group",
             "optuna_gp", "tk_nsga2", "optuna_nsga2", "tk_motpe", "optuna_motpe"]
    for fname, per in data.items():
        names = sorted((s for s in per if s != "optimum"),
                       key=lambda s: (order.index(base(s)) if base(s) in order else len(order), s))
        for sname in names:
            res = per[sname]
            cells = []
            for b in BUDGETS:
                r = regrets(res, per["optimum"], b)
                cells.append("—" if r is None else
                             f"{fmt(quantile(r, 0.5))} [{fmt(quantile(r, 0.25))}, "
                             f"{fmt(quantile(r, 0.75))}]")
            shape = f"{len(res['best_so_far'])} x {len(res['best_so_far'][0])}"
            print(f"| {fname} | {sname} | {shape} | " + " | ".join(cells) +
                  f" | {res['overhead_ms_per_trial']:.2f} |")

    pairs = [("tk_tpe", "optuna_tpe"), ("tk_tpe_true_density", "optuna_tpe"), ("tk_gp", "optuna_tpe"), ("tk_gp", "optuna_gp"),
             ("tk_tpe", "tk_random"), ("tk_halton", "tk_random"), ("tk_gp", "tk_random"),
             ("optuna_tpe", "optuna_random"), ("tk_random", "optuna_random"),
             ("tk_tpe_group", "optuna_tpe_group"), ("tk_tpe_multivariate", "optuna_tpe_multivariate"),
             ("tk_tpe_group", "tk_tpe_multivariate"), ("optuna_tpe_group", "optuna_tpe_multivariate"),
             ("tk_tpe_group", "tk_tpe"), ("tk_gp_group", "tk_gp"), ("tk_gp_group", "optuna_tpe_group"),
             ("tk_gp", "tk_gp_no_liar"), ("tk_gp_liar", "tk_gp"), ("tk_gp_liar", "optuna_gp"),
             ("tk_nsga2", "optuna_nsga2"), ("tk_nsga2", "tk_random"), ("optuna_nsga2", "optuna_random"),
             ("tk_nsga2", "optuna_motpe"), ("tk_motpe", "optuna_motpe"), ("tk_motpe", "optuna_nsga2"),
             ("tk_motpe", "tk_random")]
    print()
    print("Ratio: median regret of A / of B (below 1: A better). p(A better), p(A worse): "
          "one-sided Mann-Whitney U over the seeds.")
    print()
    print("| function | A vs B | budget | ratio | p(A better) | p(A worse) |")
    print("|---|---|---|---|---|---|")
    for fname, per in data.items():
        # A sampler also run on another budget (tk_gp_5x100) is compared as its base name.
        expanded = [(k, b) for a, b in pairs for k in per
                    if k == a or (k.startswith(a + "_") and k[len(a) + 1:][:1].isdigit())]
        for a, b in expanded:
            if b not in per:
                continue
            for budget in BUDGETS:
                ra = regrets(per[a], per["optimum"], budget)
                rb = regrets(per[b], per["optimum"], budget)
                if ra is None or rb is None:
                    continue
                ma, mb = quantile(ra, 0.5), quantile(rb, 0.5)
                ratio = ma / mb if mb > 0 else math.inf
                p_better, p_worse = mann_whitney(ra, rb)
                print(f"| {fname} | {a} vs {b} | {budget} | {fmt(ratio)} | {fmt_p(p_better)} "
                      f"| {fmt_p(p_worse)} |")


if __name__ == "__main__":
    main()
