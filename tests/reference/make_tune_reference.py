#!/usr/bin/env python3
"""Reference values for trainkit::tune's TPE sampler, computed by Optuna 3.1 itself.

Run with Debian's Optuna (python3-optuna): /usr/bin/python3 make_tune_reference.py
It rewrites tune_tpe.json beside this file: Parzen estimators (mixture weights, mus, sigmas,
categorical probabilities, log-pdf at fixed points, as 3.1 computes it and with
the upstream fix of its continuous kernels' density), the truncated normal's log-pdf and
quantiles, default_gamma / default_weights, and the below/above split of a history with
pruned and running trials, without and with the constant liar. The test suite reads that file and never needs Python.
"""
import json
import math
import pathlib
import warnings

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers._tpe import _truncnorm as truncnorm
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.sampler import (
    _get_observation_pairs,
    _split_observation_pairs,
    default_gamma,
    default_weights,
)

HERE = pathlib.Path(__file__).resolve().parent
warnings.simplefilter("ignore")  # Optuna's notes on adjusted ranges
optuna.logging.set_verbosity(optuna.logging.ERROR)


_logpdf_31 = truncnorm.logpdf


def _logpdf_fixed(x, a, b, loc=0, scale=1):
    """Optuna 3.1's truncnorm.logpdf with the upstream fix (optuna#5110, in Optuna 3.5): the
    density of a scaled normal has the factor 1/scale, which 3.1 leaves out."""
    return _logpdf_31(x, a, b, loc=loc, scale=scale) - np.log(scale)


def dist_json(d, high=None):
    """trainkit's JSON form of a distribution (space.hpp's to_json), with the range as given."""
    if isinstance(d, FloatDistribution):
        j = {"type": "float", "low": d.low, "high": high if high is not None else d.high,
             "log": d.log}
        if d.step is not None:
            j["step"] = d.step
        return j
    if isinstance(d, IntDistribution):
        return {"type": "int", "low": d.low, "high": high if high is not None else d.high,
                "step": d.step, "log": d.log}
    return {"type": "categorical", "choices": list(d.choices)}


def estimator_case(space, observations, points, multivariate=False, consider_prior=True,
                   prior_weight=1.0, consider_magic_clip=True, consider_endpoints=False,
                   given_high=None):
    """space: name -> (Optuna distribution); observations/points: name -> internal values."""
    given_high = given_high or {}
    params = _ParzenEstimatorParameters(consider_prior, prior_weight, consider_magic_clip,
                                        consider_endpoints, default_weights, multivariate)
    obs = {k: np.asarray(observations[k], dtype=float) for k in space}
    pe = _ParzenEstimator(obs, space, params)

    def as_array(name, values):
        cat = isinstance(space[name], CategoricalDistribution)
        return np.asarray(values, dtype=int if cat else float)

    at = {k: as_array(k, points[k]) for k in space}
    log_pdf = pe.log_pdf(at)
    truncnorm.logpdf = _logpdf_fixed
    try:
        log_pdf_fixed = pe.log_pdf(at)
    finally:
        truncnorm.logpdf = _logpdf_31
    out_params = {}
    for k, d in space.items():
        if isinstance(d, CategoricalDistribution):
            out_params[k] = {"probabilities": pe._categorical_weights[k].tolist()}
        else:
            out_params[k] = {"low": float(pe._low[k]), "high": float(pe._high[k]),
                             "q": None if pe._q[k] is None else float(pe._q[k]),
                             "mus": pe._mus[k].tolist(), "sigmas": pe._sigmas[k].tolist()}
    return {
        "space": {k: dist_json(d, given_high.get(k)) for k, d in space.items()},
        "options": {"multivariate": multivariate, "consider_prior": consider_prior,
                    "prior_weight": prior_weight, "consider_magic_clip": consider_magic_clip,
                    "consider_endpoints": consider_endpoints},
        "observations": {k: [float(v) for v in observations[k]] for k in space},
        "weights": pe._weights.tolist(),
        "params": out_params,
        "points": {k: [float(v) for v in points[k]] for k in space},
        "log_pdf": [float(v) for v in log_pdf],
        "log_pdf_fixed": [float(v) for v in log_pdf_fixed],
    }


def estimators():
    rng = np.random.RandomState(3)
    x = FloatDistribution(-5.0, 5.0)
    lx = FloatDistribution(1e-4, 1.0, log=True)
    qx = FloatDistribution(0.0, 1.1, step=0.25)  # Optuna narrows high to 1.0
    ix = IntDistribution(0, 21, step=2)  # high becomes 20
    lix = IntDistribution(1, 1000, log=True)
    cx = CategoricalDistribution(["a", "b", "c", "d"])

    many = rng.uniform(-5, 5, size=31)  # more than 25 observations: the weights' ramp
    cases = {
        "float": estimator_case({"x": x}, {"x": [-4.2, 0.3, 1.7, 2.0, 3.9]},
                                {"x": [-5.0, -1.0, 0.0, 1.8, 4.99]}),
        "float_empty": estimator_case({"x": x}, {"x": []}, {"x": [-4.0, 0.0, 2.5]}),
        "float_one": estimator_case({"x": x}, {"x": [1.25]}, {"x": [-4.0, 1.0, 2.5]}),
        "float_many": estimator_case({"x": x}, {"x": many}, {"x": [-4.5, -0.2, 0.7, 3.3]}),
        "float_endpoints_noprior": estimator_case(
            {"x": x}, {"x": [-4.2, 0.3, 1.7, 2.0, 3.9, -2.5]}, {"x": [-3.0, 0.5, 4.0]},
            consider_prior=False, consider_endpoints=True),
        "float_noclip_weight": estimator_case(
            {"x": x}, {"x": [0.1, 0.1001, 0.1002, 3.0]}, {"x": [0.1, 0.2, -3.0]},
            consider_magic_clip=False, prior_weight=2.5),
        "log_float": estimator_case({"lx": lx}, {"lx": [2e-4, 3e-3, 0.05, 0.5, 0.9, 0.011]},
                                    {"lx": [1e-4, 1e-3, 0.02, 0.7, 1.0]}),
        "step_float": estimator_case({"qx": qx}, {"qx": [0.0, 0.25, 0.25, 0.75]},
                                     {"qx": [0.0, 0.25, 0.5, 0.75, 1.0]},
                                     given_high={"qx": 1.1}),
        "int_step": estimator_case({"ix": ix}, {"ix": [0, 4, 4, 10, 18, 20, 4]},
                                   {"ix": [0, 2, 4, 12, 20]}, given_high={"ix": 21}),
        "int_log": estimator_case({"lix": lix}, {"lix": [1, 3, 40, 41, 700]},
                                  {"lix": [1, 2, 39, 1000]}),
        "categorical": estimator_case({"cx": cx}, {"cx": [0, 2, 2, 3, 2]},
                                      {"cx": [0, 1, 2, 3]}),
        "categorical_noprior": estimator_case({"cx": cx}, {"cx": [1, 1, 3]},
                                              {"cx": [0, 1, 2, 3]}, consider_prior=False,
                                              prior_weight=0.5),
    }
    mspace = {"x": x, "lx": lx, "ix": ix, "lix": lix, "cx": cx}
    n = 12
    mobs = {
        "x": rng.uniform(-5, 5, size=n),
        "lx": np.exp(rng.uniform(math.log(1e-4), 0.0, size=n)),
        "ix": 2 * rng.randint(0, 11, size=n),
        "lix": rng.randint(1, 1001, size=n),
        "cx": rng.randint(0, 4, size=n),
    }
    mpoints = {
        "x": [-4.9, 0.0, 2.2, 4.4],
        "lx": [1e-4, 0.003, 0.2, 0.99],
        "ix": [0, 6, 14, 20],
        "lix": [1, 17, 300, 1000],
        "cx": [3, 0, 1, 2],
    }
    cases["multivariate"] = estimator_case(mspace, mobs, mpoints, multivariate=True,
                                           given_high={"ix": 21})
    cases["multivariate_noprior"] = estimator_case(
        {"x": x, "cx": cx}, {"x": mobs["x"][:5], "cx": mobs["cx"][:5]},
        {"x": [-1.0, 3.0], "cx": [0, 2]}, multivariate=True, consider_prior=False)
    cases["multivariate_empty"] = estimator_case(
        {"x": x, "lix": lix}, {"x": [], "lix": []}, {"x": [-1.0, 3.0], "lix": [5, 50]},
        multivariate=True)
    return cases


def truncnorm_reference():
    cases = []
    bounds = [(-1.0, 1.0), (-3.0, 0.5), (0.2, 4.0), (-40.0, -30.0), (25.0, 30.0), (-8.0, -7.5),
              (6.5, 7.0), (-0.001, 0.002), (-30.0, 30.0)]
    for a, b in bounds:
        xs = np.linspace(a, b, 5)
        qs = np.asarray([0.0, 1e-6, 0.1, 0.5, 0.9, 0.999999])
        cases.append({
            "a": a, "b": b,
            "log_gauss_mass": float(truncnorm._log_gauss_mass(np.asarray([a]), np.asarray([b]))[0]),
            "x": xs.tolist(),
            "logpdf": truncnorm.logpdf(xs, a, b).tolist(),
            "q": qs.tolist(),
            "ppf": truncnorm.ppf(qs, a, b).tolist(),
        })
    return cases


def split_reference():
    """Trials of a study as trainkit records them, and Optuna's below/above split."""
    x = FloatDistribution(-5.0, 5.0)
    nan = float("nan")
    # (state, value, intermediate values, x or None)
    specs = [
        ("complete", 3.0, {}, 1.0),
        ("pruned", None, {0: 9.0, 1: 5.0}, -2.0),
        ("complete", 1.0, {0: 4.0}, 0.5),
        ("fail", None, {}, 2.0),
        ("pruned", None, {}, 3.0),  # pruned before any report
        ("complete", 1.0, {}, None),  # a tie, and a trial without x
        ("pruned", None, {0: 2.0, 3: 0.5}, 4.0),
        ("pruned", None, {0: 0.1}, -4.0),
        ("complete", -2.0, {}, 2.5),
        ("pruned", None, {0: 1.0, 1: nan}, -1.0),
        ("complete", 7.0, {}, -3.5),
        ("pruned", None, {0: 6.0, 1: 0.2}, 1.5),
        ("complete", 0.5, {}, 0.0),
        ("pruned", None, {0: 0.1}, 4.5),
        ("complete", 3.0, {}, -0.5),
        ("running", None, {0: 0.3}, 3.5),  # other workers' trials: the constant liar's
        ("running", None, {}, None),  # one that has not drawn x yet
        ("running", None, {}, -1.5),
    ]
    states = {"complete": optuna.trial.TrialState.COMPLETE,
              "pruned": optuna.trial.TrialState.PRUNED, "fail": optuna.trial.TrialState.FAIL,
              "running": optuna.trial.TrialState.RUNNING}
    out = {"trials": [], "directions": {}}
    for number, (state, value, inter, xv) in enumerate(specs):
        out["trials"].append({
            "number": number, "state": state, "value": value,
            "intermediate": [[k, None if math.isnan(v) else v] for k, v in inter.items()],
            "x": xv})
    for direction in ["minimize", "maximize"]:
        study = optuna.create_study(direction=direction)
        for state, value, inter, xv in specs:
            params, dists = ({"x": xv}, {"x": x}) if xv is not None else ({}, {})
            study.add_trial(optuna.trial.create_trial(
                state=states[state], value=value if state == "complete" else None,
                params=params, distributions=dists, intermediate_values=inter))
        out["directions"][direction] = {}
        for liar, key in [(False, "plain"), (True, "constant_liar")]:
            counted = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
            if liar:
                counted += (optuna.trial.TrialState.RUNNING,)
            numbers = [t.number for t in study.get_trials(states=counted)]
            values, scores, _ = _get_observation_pairs(study, ["x"], liar, False)
            n = sum(s < float("inf") for s, _ in scores)  # as TPESampler counts
            splits = {}
            for n_below in range(0, len(scores) + 2):
                below, above = _split_observation_pairs(scores, n_below, None)
                splits[str(n_below)] = {"below": [numbers[i] for i in below],
                                        "above": [numbers[i] for i in above]}
            below, above = _split_observation_pairs(scores, default_gamma(n), None)
            xs = np.asarray(values["x"], dtype=float)
            out["directions"][direction][key] = {
                "scores": len(scores), "n": n, "gamma": default_gamma(n), "splits": splits,
                "below_x": [float(v) for v in xs[below] if not math.isnan(v)],
                "above_x": [float(v) for v in xs[above] if not math.isnan(v)],
            }
    return out


def main():
    payload = {
        "generator": f"tests/reference/make_tune_reference.py, optuna {optuna.__version__}, "
                     f"numpy {np.__version__}",
        "estimators": estimators(),
        "truncnorm": truncnorm_reference(),
        "gamma": {str(n): default_gamma(n) for n in range(0, 301)},
        "weights": {str(n): default_weights(n).tolist() for n in [0, 1, 5, 24, 25, 26, 27, 40, 100]},
        "split": split_reference(),
    }
    (HERE / "tune_tpe.json").write_text(json.dumps(payload, indent=None, separators=(",", ":"),
                                                   allow_nan=False) + "\n")


if __name__ == "__main__":
    main()
