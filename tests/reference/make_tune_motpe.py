#!/usr/bin/env python3
"""Writes tune_motpe.json: how Optuna 3.1's TPESampler splits complete trials
into "below" and "above" with constraints (feasible trials first, the
infeasible by violation) and with several objectives (non-dominated ranks,
the boundary rank cut by greedy hypervolume subset selection), and how it
weighs the "below" kernels with several objectives (by hypervolume
contribution), which tests/tune/motpe_test.cpp holds
trainkit/tune/samplers/tpe.hpp to. Run with Debian 12's Optuna 3.1:
  /usr/bin/python3 tests/reference/make_tune_motpe.py tests/reference/tune_motpe.json
"""
import json
import sys

import numpy as np
import optuna
from optuna.samplers._tpe.sampler import (
    _calculate_nondomination_rank,
    _calculate_weights_below_for_multi_objective,
    _split_observation_pairs,
    default_gamma,
)


def draw(rng, n, d, constrained, grid):
    """n minimised points of d objectives, drawn from a few values when
    `grid` (ties); with `constrained`, half of them feasible (violation 0)."""
    values = rng.integers(0, 4, (n, d)).astype(float) if grid else rng.normal(size=(n, d))
    violations = None
    if constrained:
        violations = [0.0 if rng.random() < 0.5 else float(rng.integers(1, 4)) for _ in range(n)]
    return values, violations


def sizes(values, violations, grid):
    """The sizes of "below" to split at. Equal points tie in hypervolume to
    the last bit, where rounding makes Optuna's choice: with ties, only sizes
    that take whole non-dominated ranks of the feasible points (or that all
    feasible points fill)."""
    n = len(values)
    plain = {default_gamma(n), max(1, n // 2), n}
    if not grid or values.shape[1] == 1:
        return sorted(plain)
    feasible = values if violations is None else values[np.array(violations) == 0]
    if len(feasible) == 0:
        return sorted(plain)
    ranks = _calculate_nondomination_rank(feasible)
    cuts = {int(np.sum(ranks <= r)) for r in range(int(ranks.max()) + 1)}
    if violations is not None:  # a below all feasible points fill splits by violation
        cuts |= {k for k in plain if k >= len(feasible)}
    return sorted(cuts)[:4]


def case(values, violations, n_below, grid):
    scores = [(-float("inf"), [float(v) for v in row]) for row in values]
    below, above = _split_observation_pairs(scores, n_below, violations)
    out = {"values": values.tolist(), "n_below": n_below,
           "below": sorted(int(i) for i in below), "above": sorted(int(i) for i in above)}
    if violations is not None:
        out["violations"] = violations
    if values.shape[1] > 1 and not grid:  # per below trial, in trial order
        out["weights"] = _calculate_weights_below_for_multi_objective(
            scores, np.sort(below), violations).tolist()
    return out


def main():
    rng = np.random.default_rng(11)
    cases = []
    for d in (1, 2, 3):
        for n in (1, 2, 5, 12, 40, 120):
            for constrained in (False, True):
                for grid in (False, True):
                    values, violations = draw(rng, n, d, constrained, grid)
                    for n_below in sizes(values, violations, grid):
                        cases.append(case(values, violations, n_below, grid))
    with open(sys.argv[1], "w") as f:
        json.dump({"optuna": optuna.__version__, "cases": cases}, f, allow_nan=False)
        f.write("\n")


if __name__ == "__main__":
    main()
