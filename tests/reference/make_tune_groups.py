#!/usr/bin/env python3
"""Writes tune_groups.json: Optuna's group-decomposed search space
(optuna.samplers._search_space.group_decomposed, what TPESampler(group=True)
models) for sequences of trials, which group_test.cpp holds
group_decomposed_search_space to. Run with Debian 12's Optuna 3.1:
  /usr/bin/python3 tests/reference/make_tune_groups.py tests/reference/tune_groups.json
"""
import json
import sys

import optuna
from optuna.distributions import FloatDistribution
from optuna.samplers._search_space.group_decomposed import _GroupDecomposedSearchSpace

optuna.logging.set_verbosity(optuna.logging.ERROR)
STATES = {"complete": optuna.trial.TrialState.COMPLETE, "pruned": optuna.trial.TrialState.PRUNED,
          "fail": optuna.trial.TrialState.FAIL, "running": optuna.trial.TrialState.RUNNING}
# Each case: the trials (state, parameter names) in order.
CASES = [
    [("complete", "ab"), ("complete", "ac"), ("complete", "ab")],
    [("complete", "xyz"), ("complete", "xy"), ("complete", "yzw"), ("complete", "w")],
    # A conditional space: branch, then each branch's own parameters.
    [("complete", ["branch", "a1", "a2"]), ("complete", ["branch", "b1"]),
     ("complete", ["branch", "a1", "a2"]), ("complete", ["branch", "c1", "c2", "c3"]),
     ("complete", ["branch", "b1", "shared"]), ("complete", ["branch", "c1", "c2", "c3", "shared"])],
    # Pruned trials count only with include_pruned; failed and running ones never.
    [("complete", "ab"), ("pruned", "ac"), ("fail", "ad"), ("running", "ae"), ("complete", "abf")],
    [],
]


def groups(case, include_pruned):
    study = optuna.create_study()
    for state, names in case:
        params = {n: 0.5 for n in names}
        dists = {n: FloatDistribution(0, 1) for n in names}
        trial = optuna.trial.create_trial(
            state=STATES[state], params=params, distributions=dists,
            value=1.0 if state == "complete" else None,
            intermediate_values={0: 1.0} if state == "pruned" else None)
        study.add_trial(trial)
    space = _GroupDecomposedSearchSpace(include_pruned).calculate(study)
    return [sorted(g) for g in space.search_spaces]


out = {"optuna": optuna.__version__, "cases": []}
for case in CASES:
    out["cases"].append({"trials": [[s, list(n)] for s, n in case],
                         "groups": groups(case, False), "groups_with_pruned": groups(case, True)})
with open(sys.argv[1], "w") as fh:
    json.dump(out, fh, indent=1)
    fh.write("\n")
