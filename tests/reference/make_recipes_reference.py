#!/usr/bin/env python3
"""Reference values for the training recipes (weight initialisation, label
smoothing), computed by PyTorch itself.

Run with Debian's PyTorch (python3-torch): /usr/bin/python3 make_recipes_reference.py
It rewrites recipes.json beside this file; the tests read it and never need Python.
"""
import json
import pathlib

import torch
import torch.nn.functional as F
from torch.nn import init

HERE = pathlib.Path(__file__).resolve().parent


def values(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def init_reference():
    """Each scheme from a fixed seed: the same seed must give the same weights in C++."""
    cases = [
        ("kaiming_normal_fan_out_relu", [6, 4, 3, 3], 1,
         lambda w: init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")),
        ("kaiming_uniform_fan_in_leaky", [7, 5], 2,
         lambda w: init.kaiming_uniform_(w, a=0.1, mode="fan_in", nonlinearity="leaky_relu")),
        ("xavier_uniform_tanh", [5, 8], 3,
         lambda w: init.xavier_uniform_(w, gain=init.calculate_gain("tanh"))),
        ("xavier_normal", [4, 3, 2], 4, lambda w: init.xavier_normal_(w)),
        ("orthogonal_wide", [4, 6], 5, lambda w: init.orthogonal_(w, gain=2.0)),
        ("orthogonal_tall", [6, 4], 6, lambda w: init.orthogonal_(w)),
        ("trunc_normal", [64], 7, lambda w: init.trunc_normal_(w, mean=0.5, std=0.3, a=0.0, b=1.0)),
    ]
    out = []
    for name, shape, seed, fill in cases:
        torch.manual_seed(seed)
        w = torch.empty(shape)
        fill(w)
        out.append({"name": name, "shape": shape, "seed": seed, "values": values(w)})
    gains = {n: init.calculate_gain(n) for n in ["linear", "relu", "tanh", "sigmoid", "selu"]}
    gains["leaky_relu_0.2"] = init.calculate_gain("leaky_relu", 0.2)
    return {"cases": out, "gains": gains}


def label_smoothing_reference():
    """F.cross_entropy with label_smoothing: the mean loss and its gradient on the logits."""
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(8, 5, generator=g) * 3
    target = torch.randint(0, 5, (8,), generator=g)
    cases = []
    for s in [0.0, 0.1, 0.3, 1.0]:
        x = logits.clone().requires_grad_(True)
        loss = F.cross_entropy(x, target, label_smoothing=s)
        loss.backward()
        cases.append({"label_smoothing": s, "loss": float(loss), "grad": values(x.grad)})
    return {"logits": values(logits), "shape": list(logits.shape),
            "target": [int(t) for t in target], "cases": cases}


if __name__ == "__main__":
    torch.set_num_threads(1)
    payload = {"init": init_reference(), "label_smoothing": label_smoothing_reference(),
               "generator": f"tests/reference/make_recipes_reference.py, torch {torch.__version__}"}
    (HERE / "recipes.json").write_text(json.dumps(payload, indent=None, separators=(",", ":")) + "\n")
