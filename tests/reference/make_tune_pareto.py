#!/usr/bin/env python3
"""Writes tune_pareto.json: Optuna's multi-objective rules on random point
sets, which tests/tune/pareto_test.cpp holds trainkit/tune/pareto.hpp to:
the Pareto front (optuna.study._multi_objective), NSGA-II's non-dominated
sort with and without constraints and its crowding distance
(optuna.samplers.nsgaii._sampler), and the exact hypervolume
(optuna._hypervolume.WFG). Run with Debian 12's Optuna 3.1:
  /usr/bin/python3 tests/reference/make_tune_pareto.py tests/reference/tune_pareto.json
"""
import json
import sys

import numpy as np
import optuna
from optuna.samplers import NSGAIISampler
from optuna.samplers.nsgaii._sampler import _calc_crowding_distance
from optuna.study import StudyDirection
from optuna.study._multi_objective import _get_pareto_front_trials_by_trials
from optuna._hypervolume import WFG

optuna.logging.set_verbosity(optuna.logging.ERROR)
DIRECTIONS = {"minimize": StudyDirection.MINIMIZE, "maximize": StudyDirection.MAXIMIZE}


def frozen(number, values, constraints=None):
    attrs = {} if constraints is None else {"constraints": constraints}
    return optuna.trial.FrozenTrial(
        number=number, state=optuna.trial.TrialState.COMPLETE, value=None, values=values,
        datetime_start=None, datetime_complete=None, params={}, distributions={},
        user_attrs={}, system_attrs=attrs, intermediate_values={}, trial_id=number)


def case(rng, n, directions, constrained, grid):
    """n points, each objective drawn from a few values when `grid` (ties)."""
    d = len(directions)
    values = rng.integers(0, 5, (n, d)).astype(float) if grid else rng.normal(size=(n, d))
    constraints = rng.normal(size=(n, 2)) if constrained else None
    trials = [frozen(i, [float(v) for v in values[i]],
                     None if constraints is None else [float(c) for c in constraints[i]])
              for i in range(n)]
    dirs = [DIRECTIONS[x] for x in directions]
    sampler = NSGAIISampler(constraints_func=(lambda t: [0.0]) if constrained else None)
    ranks = [-1] * n
    for r, front in enumerate(sampler._fast_non_dominated_sort(list(trials), dirs)):
        for t in front:
            ranks[t.number] = r
    front = sorted(t.number for t in _get_pareto_front_trials_by_trials(trials, dirs))
    out = {"directions": directions, "values": values.tolist(), "ranks": ranks, "front": front}
    if constraints is not None:
        out["constraints"] = constraints.tolist()
    if not grid:  # ties make the crowding distance depend on the sort's order
        crowding = _calc_crowding_distance(list(trials))
        # JSON has no infinity: the ends' infinite distances as "inf"
        out["crowding"] = [crowding[i] if np.isfinite(crowding[i]) else "inf" for i in range(n)]
    # the hypervolume of the minimised points, the reference beyond all of them
    signs = np.array([1.0 if x == "minimize" else -1.0 for x in directions])
    points = values * signs
    reference = points.max(axis=0) + 0.5
    out["reference"] = reference.tolist()
    out["hypervolume"] = float(WFG().compute(points.copy(), reference.copy()))
    return out


def main():
    rng = np.random.default_rng(7)
    cases = []
    for directions in (["minimize", "minimize"], ["minimize", "maximize"],
                       ["maximize", "minimize", "minimize"],
                       ["minimize", "minimize", "maximize", "minimize"]):
        for n in (1, 2, 7, 40):
            for constrained in (False, True):
                for grid in (False, True):
                    cases.append(case(rng, n, directions, constrained, grid))
    with open(sys.argv[1], "w") as f:
        json.dump({"optuna": optuna.__version__, "cases": cases}, f, allow_nan=False)
        f.write("\n")


if __name__ == "__main__":
    main()
