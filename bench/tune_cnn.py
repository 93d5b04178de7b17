#!/usr/bin/env python3
"""The real task: the demo CNN's validation loss over 4 hyperparameters (lr,
weight decay, batch size, OneCycle pct_start), 30 trials, searched by

  tk_tpe_none    trainkit's TPE, no pruning     (examples/tune --pruner none)
  tk_tpe_asha    trainkit's TPE with ASHA       (examples/tune --pruner asha), rungs
                 after 2 and 4 epochs, the best 1/3 go on
  tk_tpe_asha4   the same with reduction factor 4 (Optuna's default): the best 1/4
  tk_random_none trainkit's random search       (examples/tune --sampler random)
  optuna_tpe     Optuna's TPESampler (defaults), driving the same C++ training
                 through `examples/tune --evaluate` (ask/tell, one process a trial)

With --space optimizer the space is conditional (examples/tune --space
optimizer): AdamW (lr, weight decay, beta2) or SGD (lr, momentum, weight
decay, Nesterov), each branch's parameters its own, plus batch size and
pct_start. Then also:

  tk_tpe_group_none  trainkit's TPE, multivariate with groups (--group)
  tk_gp_none         trainkit's GP, the branch choice alone modelled
  tk_gp_group_none   trainkit's GP with a model per group (--group)
  optuna_tpe_group   Optuna's TPESampler(multivariate=True, group=True)

Every run trains with the same code, data and per-trial seed (seed + trial
number), so only the search differs. Per run: the best validation loss and
the epochs trained (the compute). Results append to a JSON-lines file, one
line per (config, seed), so an interrupted run goes on where it stopped;
then a markdown table of medians and quartiles over the seeds.

  /usr/bin/python3 bench/tune_cnn.py build/demo/examples/tune --seeds 5 --out cnn.jsonl
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

SPACE_NOTES = {
    "lr-wd": "lr 1e-4..3e-2 log, weight_decay 1e-5..1e-1 log, batch_size {32,64,128,256}, "
             "pct_start 0.1..0.5",
    "optimizer": "optimizer {adamw: lr 1e-4..3e-2 log, weight_decay 1e-5..1e-1 log, beta2 "
                 "0.9..0.9999; sgd: lr 1e-3..0.3 log, momentum 0.5..0.99, weight_decay 1e-6..1e-2 "
                 "log, nesterov}, batch_size {32,64,128,256}, pct_start 0.1..0.5",
}
STUDY = {"lr-wd": "cnn", "optimizer": "cnn-optimizer"}  # examples/tune's study names


def common(a):
    return ["--epochs", str(a.epochs), "--train-size", str(a.train_size),
            "--val-size", str(a.val_size), "--threads", str(a.threads), "--space", a.space]


def run_trainkit(a, sampler, pruner, seed, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [a.binary, "--sampler", sampler, "--pruner", pruner, "--seed", str(seed),
             "--trials", str(a.trials), "--storage", os.path.join(tmp, "study.db")] +
            list(extra) + common(a),
            check=True, capture_output=True, text=True).stdout
        with open(os.path.join(tmp, STUDY[a.space], "trials.json")) as fh:
            trials = json.load(fh)["trials"]
    best = min(t["value"] for t in trials if t["state"] == "complete")
    epochs = sum(t["user_attrs"].get("epochs", 0) for t in trials)
    assert re.search(r"best: trial", out), out
    return best, epochs


def suggest(t, space):
    """examples/tune's space, in the order train_once suggests it."""
    if space == "lr-wd":
        return {"lr": t.suggest_float("lr", 1e-4, 3e-2, log=True),
                "weight_decay": t.suggest_float("weight_decay", 1e-5, 1e-1, log=True),
                "batch_size": t.suggest_categorical("batch_size", [32, 64, 128, 256]),
                "pct_start": t.suggest_float("pct_start", 0.1, 0.5)}
    p = {"optimizer": t.suggest_categorical("optimizer", ["adamw", "sgd"])}
    if p["optimizer"] == "adamw":
        p["adamw_lr"] = t.suggest_float("adamw_lr", 1e-4, 3e-2, log=True)
        p["adamw_weight_decay"] = t.suggest_float("adamw_weight_decay", 1e-5, 1e-1, log=True)
        p["adamw_beta2"] = t.suggest_float("adamw_beta2", 0.9, 0.9999)
    else:
        p["sgd_lr"] = t.suggest_float("sgd_lr", 1e-3, 0.3, log=True)
        p["sgd_momentum"] = t.suggest_float("sgd_momentum", 0.5, 0.99)
        p["sgd_weight_decay"] = t.suggest_float("sgd_weight_decay", 1e-6, 1e-2, log=True)
        p["sgd_nesterov"] = t.suggest_categorical("sgd_nesterov", [False, True])
    p["batch_size"] = t.suggest_categorical("batch_size", [32, 64, 128, 256])
    p["pct_start"] = t.suggest_float("pct_start", 0.1, 0.5)
    return p


def run_optuna(a, seed, **tpe):
    import warnings
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, **tpe))
    epochs = 0
    for _ in range(a.trials):
        t = study.ask()
        params = suggest(t, a.space)
        out = subprocess.run(
            [a.binary, "--evaluate", json.dumps(params), "--seed", str(seed + t.number)] + common(a),
            check=True, capture_output=True, text=True).stdout
        m = re.search(r"value (\S+) epochs (\d+)", out)
        epochs += int(m.group(2))
        study.tell(t, float(m.group(1)))
    return study.best_value, epochs


CONFIGS = {
    "tk_tpe_none": lambda a, s: run_trainkit(a, "tpe", "none", s),
    "tk_tpe_asha": lambda a, s: run_trainkit(a, "tpe", "asha", s),
    "tk_tpe_asha4": lambda a, s: run_trainkit(a, "tpe", "asha", s, ["--reduction-factor", "4"]),
    "tk_random_none": lambda a, s: run_trainkit(a, "random", "none", s),
    "optuna_tpe": run_optuna,
    "tk_tpe_group_none": lambda a, s: run_trainkit(a, "tpe", "none", s, ["--group"]),
    "tk_gp_none": lambda a, s: run_trainkit(a, "gp", "none", s),
    "tk_gp_group_none": lambda a, s: run_trainkit(a, "gp", "none", s, ["--group"]),
    "optuna_tpe_group": lambda a, s: run_optuna(a, s, multivariate=True, group=True),
}


def table(rows, a):
    def q(v):
        v = sorted(v)
        qs = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
        return qs
    print(f"| search | seeds | best val loss, median [quartiles] | epochs trained, median (of {a.trials * a.epochs}) |")
    print("|---|---|---|---|")
    for name in CONFIGS:
        got = [r for r in rows if r["config"] == name]
        if not got:
            continue
        b = q([r["best"] for r in got])
        e = statistics.median(r["epochs"] for r in got)
        print(f"| {name} | {len(got)} | {b[1]:.4f} [{b[0]:.4f}, {b[2]:.4f}] | {e:.0f} |")
    tpe = {r["seed"]: r for r in rows if r["config"] == "tk_tpe_none"}
    for name in ("tk_tpe_asha", "tk_tpe_asha4"):
        asha = [r for r in rows if r["config"] == name and r["seed"] in tpe]
        if not asha:
            continue
        saved = 1 - sum(r["epochs"] for r in asha) / sum(tpe[r["seed"]]["epochs"] for r in asha)
        worse = sum(r["best"] > tpe[r["seed"]]["best"] for r in asha)
        print(f"\n{name}: {100 * saved:.0f}% fewer epochs than tk_tpe_none over {len(asha)} seeds; "
              f"its best value was worse than no pruning's on {worse} of them.")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("binary")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--val-size", type=int, default=500)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--space", choices=sorted(SPACE_NOTES), default="lr-wd")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--out", default="tune_cnn.jsonl")
    a = p.parse_args()
    rows = []
    if os.path.exists(a.out):
        with open(a.out) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        rows = [r for r in rows if r.get("space", "lr-wd") == a.space]
    for seed in range(a.seeds):
        for name in a.configs.split(","):
            if any(r["config"] == name and r["seed"] == seed for r in rows):
                continue
            best, epochs = CONFIGS[name](a, 1000 * seed)
            row = {"config": name, "space": a.space, "seed": seed, "best": best, "epochs": epochs}
            rows.append(row)
            with open(a.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"Demo CNN on the glyphs ({a.train_size} train, {a.val_size} validation), {SPACE_NOTES[a.space]}; "
          f"{a.trials} trials of at most {a.epochs} epochs.\n")
    table(rows, a)


if __name__ == "__main__":
    main()
