#!/usr/bin/env python3
"""Python's Optuna and trainkit on one study database, both ways:
  optuna_interop_test.py EXE sqlite FILE
  optuna_interop_test.py EXE postgres URL      (postgresql://user@host:port/db)
EXE is tune_optuna_interop (optuna_interop.cpp), which runs the same
objective as below and dumps a study as trainkit reads it.
1. trainkit runs a study; Optuna loads it and sees every trial as trainkit
   does, finds the same best trial, makes its dataframe and plots, and
   continues it (claiming trainkit's waiting trial); trainkit reads back
   Optuna's trials as Optuna does.
2. Optuna runs a study; trainkit reads it as Optuna does and continues it
   (claiming Optuna's waiting trial); Optuna reads back trainkit's trials.
3. The same both ways for a study of two objectives with a constraint
   (NSGA-II on both sides): values, constraints, and the best trials
   (the feasible Pareto front) that trainkit and Optuna 4 return; trainkit's
   NSGA-II breeds from Optuna's trials (Optuna's, continuing trainkit's
   study, stays in its random first generation: trainkit's trials carry no
   generation of Optuna's).
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import uuid
import warnings

import optuna
from optuna.distributions import json_to_distribution

optuna.logging.set_verbosity(optuna.logging.ERROR)  # not each failing trial
EXE, KIND, WHERE = sys.argv[1:4]
if KIND == "sqlite":
    for leftover in (WHERE, WHERE + "-wal", WHERE + "-shm", WHERE + "-journal"):
        if os.path.exists(leftover):
            os.remove(leftover)  # a fresh database each run
    URL, CPP_URL = "sqlite:///" + WHERE, "sqlite:" + WHERE
else:  # a database of its own, new each run, on the server of WHERE
    import psycopg2
    admin = psycopg2.connect(WHERE)
    admin.autocommit = True
    admin.cursor().execute("DROP DATABASE IF EXISTS trainkit_interop WITH (FORCE)")
    admin.cursor().execute("CREATE DATABASE trainkit_interop")
    admin.close()
    URL = WHERE.rsplit("/", 1)[0] + "/trainkit_interop"
    CPP_URL = "postgres:" + URL
OPTUNA_3 = int(optuna.__version__.split(".")[0]) < 4
# trainkit writes the revision this Optuna opens as it is (optuna_interop.cpp
# reads the variable): its default for Optuna 3, the option for Optuna 4.
SCHEMA = "optuna3" if OPTUNA_3 else "optuna4"
os.environ["TRAINKIT_TEST_OPTUNA_SCHEMA"] = SCHEMA


def storage():
    """Optuna's storage, as a user opens it: the URL, no option."""
    return URL


INF = float("inf")
# Optuna 3's best trial on SQLite is an infinite one where any is: the NULL it
# stores for an infinity sorts first (fixed in 4.0).
BEST_IS_RIGHT = not (OPTUNA_3 and KIND == "sqlite")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED:", what, file=sys.stderr)


def number(x):  # as the C++ dump writes a number
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    return x


def numbers(v):
    if isinstance(v, dict):
        return {k: numbers(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [numbers(x) for x in v]
    return number(v)


def seconds(t):  # a datetime Optuna read, as seconds since the epoch (0: none)
    return t.timestamp() if t else 0


def view(t):
    """An Optuna FrozenTrial in the dump's form (the distributions apart)."""
    return {
        "number": t.number,
        "state": t.state.name.lower(),
        # (of several objectives, Optuna's trial has no `value`)
        "value": number(t.values[0]) if t.values is not None and len(t.values) == 1 else None,
        "params": numbers(t.params),
        "intermediate": {str(k): number(v) for k, v in t.intermediate_values.items()},
        "user_attrs": numbers(t.user_attrs),
        "fixed_params": t.system_attrs.get("fixed_params"),
        "values": numbers(list(t.values)) if t.values is not None else [],
        "constraints": numbers(list(c)) if (c := t.system_attrs.get("constraints")) else None,
    }


def trainkit_reads(study_name, dump="dump"):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([EXE, CPP_URL, study_name, dump, f.name], check=True)
        with open(f.name) as read:
            return json.load(read)


def same_trials(study_name, what, dump="dump"):
    """Optuna's and trainkit's reading of the study agree, trial by trial."""
    ours = optuna.load_study(study_name=study_name, storage=storage()).trials
    theirs = trainkit_reads(study_name, dump)
    check(len(ours) == len(theirs), f"{what}: {len(ours)} trials in Optuna, {len(theirs)} in trainkit")
    for o, t in zip(ours, theirs):
        mine = view(o)
        for key, value in mine.items():
            check(value == t[key], f"{what}: trial {o.number} {key}: Optuna {value!r}, trainkit {t[key]!r}")
        for name, d in o.distributions.items():
            check(json_to_distribution(json.dumps(t["distributions"][name])) == d,
                  f"{what}: trial {o.number} distribution of {name}")
        for key, at in (("started", o.datetime_start), ("finished", o.datetime_complete)):
            check(abs(seconds(at) - t[key]) < 2e-3, f"{what}: trial {o.number} {key}: {at} vs {t[key]}")
    return ours, theirs


def objective(trial):
    """optuna_interop.cpp's objective, in Python."""
    x = trial.suggest_float("x", -5, 5)
    lr = trial.suggest_float("lr", 1e-5, 1, log=True)
    frac = trial.suggest_float("frac", 0, 1, step=0.25)
    n = trial.suggest_int("n", 1, 9, step=2)
    layers = trial.suggest_int("layers", 1, 64, log=True)
    with warnings.catch_warnings():  # Optuna's own warning: 0..10 step 3 becomes 0..9
        warnings.simplefilter("ignore")
        k = trial.suggest_int("k", 0, 10, step=3)
    opt = trial.suggest_categorical("opt", ["adam", "sgd", None, True, 2.5])
    value = x * x + math.log10(lr) ** 2 / 25 + frac + (n + layers + k) / 100 + (0 if opt == "adam" else 0.5)
    trial.set_user_attr("by", {"lib": "optuna", "odd": [INF, float("nan")]})
    trial.report(value + 1, 0)
    trial.report(INF if trial.number % 2 else -INF, 1)
    trial.report(float("nan"), 2)
    trial.report(value, 3)
    if trial.number % 5 == 2:
        raise optuna.TrialPruned()
    if trial.number % 5 == 3:
        raise RuntimeError("failed by number")
    return INF if trial.number % 5 == 4 else value


def best_of(dump):
    done = [t for t in dump if t["state"] == "complete" and isinstance(t["value"], float)]
    return min(done, key=lambda t: t["value"])


def from_trainkit():
    name = "from-trainkit-" + uuid.uuid4().hex
    subprocess.run([EXE, CPP_URL, name, "run", "10"], check=True)
    if KIND == "sqlite":  # written as this Optuna writes it, and opened as it is
        import sqlite3
        revision = sqlite3.connect(WHERE).execute("SELECT version_num FROM alembic_version").fetchall()
        check(revision == [("v3.0.0.d" if OPTUNA_3 else "v3.2.0.a",)], f"alembic revision {revision}")
        # Optuna's command line too (Optuna 3.1's refused Optuna 4's revision)
        listed = subprocess.run([OPTUNA_CLI, "studies", "--storage", URL, "-f", "json"],
                                check=True, capture_output=True, text=True).stdout
        check(name in [s["name"] for s in json.loads(listed)], f"optuna studies lists {name}")
    with warnings.catch_warnings(record=True) as caught:  # Optuna warns of an unnormalised range
        warnings.simplefilter("always")
        ours, theirs = same_trials(name, "trainkit's study")
    unnormalised = [str(w.message) for w in caught if "divisible" in str(w.message)]
    check(not unnormalised, f"Optuna warned loading trainkit's study: {unnormalised}")
    check(all(t["distributions"]["k"]["attributes"]["high"] == 9 for t in theirs
              if "k" in t["distributions"]), "0..10 step 3 is stored as Optuna stores it, 0..9")
    states = [t["state"] for t in theirs]
    check(states.count("complete") == 6 and states.count("pruned") == 2 and states.count("fail") == 2
          and states[-1] == "waiting", f"trainkit's study states {states}")
    study = optuna.load_study(study_name=name, storage=storage())
    check(study.direction == optuna.study.StudyDirection.MINIMIZE, "direction")
    best = best_of(theirs)
    check(not BEST_IS_RIGHT or study.best_trial.number == best["number"], "best trial")
    check(not BEST_IS_RIGHT or numbers(study.best_params) == best["params"], "best params")
    try:
        import pandas  # noqa: F401 (Optuna's dataframe needs it; not among the test's packages)
        frame = study.trials_dataframe()
        check(len(frame) == 11 and "params_lr" in frame and "user_attrs_by" in frame, "dataframe")
    except ImportError:
        print("pandas is not installed: trials_dataframe not checked")
    import optuna.visualization as vis
    for plot in (vis.plot_optimization_history(study), vis.plot_intermediate_values(study),
                 vis.plot_slice(study), vis.plot_parallel_coordinate(study),
                 vis.plot_contour(study, params=["x", "lr"]), vis.plot_edf(study)):
        check(len(plot.data) > 0, f"plot {plot.layout.title.text} has no data")
    # Optuna continues trainkit's study: its waiting trial first.
    study.optimize(objective, n_trials=4, catch=(RuntimeError,))
    ours, theirs = same_trials(name, "trainkit's study continued by Optuna")
    check(len(ours) == 14 and ours[10].params["x"] == 0.5 and ours[10].params["opt"] is None
          and ours[10].state.name == "COMPLETE", "Optuna ran trainkit's enqueued trial with its values")


def from_optuna():
    name = "from-optuna-" + uuid.uuid4().hex
    study = optuna.create_study(study_name=name, storage=storage(),
                                sampler=optuna.samplers.TPESampler(seed=3, n_startup_trials=4))
    study.optimize(objective, n_trials=8, catch=(RuntimeError,))
    study.enqueue_trial({"x": -1.5, "opt": "sgd"}, user_attrs={"queued": True})
    same_trials(name, "Optuna's study")
    # trainkit continues it: the waiting trial first, then its own.
    subprocess.run([EXE, CPP_URL, name, "run", "5"], check=True)
    ours, theirs = same_trials(name, "Optuna's study continued by trainkit")
    check(len(ours) == 14, f"{len(ours)} trials after trainkit's 5 and its enqueued one")
    check([t.number for t in ours] == list(range(14)), "numbers are dense")
    claimed = ours[8]
    check(claimed.params["x"] == -1.5 and claimed.params["opt"] == "sgd"
          and claimed.user_attrs.get("queued") is True, "trainkit ran Optuna's enqueued trial with its values")
    study = optuna.load_study(study_name=name, storage=storage())
    check(not BEST_IS_RIGHT or study.best_trial.number == best_of(theirs)["number"],
          "best trial after trainkit's")
    study.optimize(objective, n_trials=1, catch=(RuntimeError,))  # and Optuna goes on after trainkit
    check(len(study.trials) == 14 and study.trials[13].params["x"] == 0.5
          and study.trials[13].state.name == "FAIL", "Optuna ran trainkit's enqueued trial (number 13 fails)")


PARETO = [optuna.study.StudyDirection.MINIMIZE, optuna.study.StudyDirection.MAXIMIZE]


def pareto_objective(trial):
    """optuna_interop.cpp's two objectives; the constraint is y <= 0.8."""
    x = trial.suggest_float("x", -3, 5)
    y = trial.suggest_float("y", 0, 1)
    return x * x + y, -(x - 2) ** 2


def pareto_constraints(trial):
    return [trial.params["y"] - 0.8]


def feasible_front(dump):
    """The complete feasible trials no other one dominates, from a dump."""
    done = [t for t in dump if t["state"] == "complete" and all(c <= 0 for c in t["constraints"])]
    loss = {t["number"]: (t["values"][0], -t["values"][1]) for t in done}
    beats = lambda a, b: all(x <= y for x, y in zip(a, b)) and a != b
    return {n for n, v in loss.items() if not any(beats(w, v) for w in loss.values())}


def same_best_trials(name, theirs, what):
    front = feasible_front(theirs)
    check(len(front) >= 2, f"{what}: a front of {len(front)} trials")
    check({t["number"] for t in theirs if t["best"]} == front,
          f"{what}: trainkit's best trials are the feasible Pareto front")
    study = optuna.load_study(study_name=name, storage=storage())
    check(study.directions == PARETO, f"{what}: directions {study.directions}")
    if not OPTUNA_3:  # Optuna 3's best_trials leave the constraints out
        check({t.number for t in study.best_trials} == front, f"{what}: Optuna's best_trials")


def pareto_from_trainkit():
    name = "pareto-trainkit-" + uuid.uuid4().hex
    subprocess.run([EXE, CPP_URL, name, "pareto", "20"], check=True)
    ours, theirs = same_trials(name, "trainkit's two-objective study", "dump-pareto")
    check(len(ours) == 20 and all(len(t.values) == 2 for t in ours), "20 trials of two values")
    same_best_trials(name, theirs, "trainkit's two-objective study")
    study = optuna.load_study(study_name=name, storage=storage(), sampler=optuna.samplers.NSGAIISampler(
        seed=2, population_size=10, constraints_func=pareto_constraints))
    study.optimize(pareto_objective, n_trials=6)
    ours, theirs = same_trials(name, "trainkit's two-objective study continued by Optuna",
                               "dump-pareto")
    same_best_trials(name, theirs, "trainkit's two-objective study continued by Optuna")


def pareto_from_optuna():
    name = "pareto-optuna-" + uuid.uuid4().hex
    study = optuna.create_study(study_name=name, storage=storage(), directions=["minimize", "maximize"],
                                sampler=optuna.samplers.NSGAIISampler(
                                    seed=5, population_size=10, constraints_func=pareto_constraints))
    study.optimize(pareto_objective, n_trials=16)
    ours, theirs = same_trials(name, "Optuna's two-objective study", "dump-pareto")
    check(all(t["constraints"] is not None for t in theirs), "trainkit reads Optuna's constraints")
    same_best_trials(name, theirs, "Optuna's two-objective study")
    subprocess.run([EXE, CPP_URL, name, "pareto", "4"], check=True)
    ours, theirs = same_trials(name, "Optuna's two-objective study continued by trainkit",
                               "dump-pareto")
    check(len(ours) == 20, f"{len(ours)} trials after trainkit's 4")
    # trainkit's NSGA-II (population 4) breeds from Optuna's 16 trials: a child
    # keeps a parent's value of x or y unless both mutate; a random draw never does
    xs, ys = {t.params["x"] for t in ours[:16]}, {t.params["y"] for t in ours[:16]}
    check(any(t.params["x"] in xs or t.params["y"] in ys for t in ours[16:]),
          "trainkit's NSGA-II bred from Optuna's trials")
    same_best_trials(name, theirs, "Optuna's two-objective study continued by trainkit")


def upgraded_by_optuna_4():
    """trainkit's default file (Optuna 3's revision) is one command away from
    Optuna 4: Optuna refuses it naming `optuna storage upgrade`, which takes
    it on, after which Optuna and trainkit both go on with it."""
    with tempfile.TemporaryDirectory() as folder:
        url = "sqlite:///" + folder + "/default.db"
        name = "default-" + uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if k != "TRAINKIT_TEST_OPTUNA_SCHEMA"}
        run = [EXE, "sqlite:" + folder + "/default.db", name]
        subprocess.run(run + ["run", "3"], check=True, env=env)
        try:
            optuna.load_study(study_name=name, storage=url)
            check(False, "Optuna 4 opened Optuna 3's revision without an upgrade")
        except RuntimeError as e:
            check("optuna storage upgrade" in str(e), f"Optuna's refusal: {e}")
        subprocess.run([OPTUNA_CLI, "storage", "upgrade", "--storage", url], check=True,
                       capture_output=True)
        check(len(optuna.load_study(study_name=name, storage=url).trials) == 4, "upgraded study")
        subprocess.run(run + ["run", "2"], check=True, env=env)
        check(len(optuna.load_study(study_name=name, storage=url).trials) == 6,
              "trainkit goes on with the upgraded file")


OPTUNA_CLI = "/usr/bin/optuna"
print("optuna", optuna.__version__, "on", KIND)
if KIND == "sqlite" and not OPTUNA_3:
    upgraded_by_optuna_4()
from_trainkit()
from_optuna()
pareto_from_trainkit()
pareto_from_optuna()
if failures:
    sys.exit(f"{len(failures)} checks failed")
print("all checks passed")
