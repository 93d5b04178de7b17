"""Writes the checkpoint of PyTorch's distributed checkpoint (DCP) that the
tests load (tests/dcp_test.cpp), and what loading it must give.

Run with PyTorch 2.x (Debian 13's root), from the repo root:
  bash scripts/debian13.sh run /usr/bin/python3 /src/tests/reference/make_dcp_reference.py
It trains a small MLP for three AdamW steps in one process, saves the model
and the optimizer state as users of dcp.save do ({"model": ..., "optim": ...}
from get_state_dict) to dcp/adamw/, then trains three more steps. dcp.json
holds the data, the options, the saved tensors (every value of the files, as
float64, which float32 converts to exactly) and the three losses and the
parameters after them, which a trainkit run resumed from dcp/adamw/ must give.
"""
import json
import os
import shutil
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "dcp", "adamw")
OPTIONS = {"lr": 0.02, "weight_decay": 0.1, "betas": [0.9, 0.999], "eps": 1e-8}


def values(t):
    return t.detach().reshape(-1).double().tolist()


def main():
    warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    optim = torch.optim.AdamW(model.parameters(), lr=OPTIONS["lr"],
                              weight_decay=OPTIONS["weight_decay"],
                              betas=tuple(OPTIONS["betas"]), eps=OPTIONS["eps"])
    x = torch.linspace(-1, 1, 24).reshape(8, 3)
    y = torch.stack([x.sum(1), x[:, 0] * x[:, 2]], 1)

    def step():
        optim.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optim.step()
        return loss.item()

    for _ in range(3):
        step()
    model_sd, optim_sd = get_state_dict(model, optim)
    shutil.rmtree(OUT, ignore_errors=True)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=OUT)
    saved = {"model." + k: values(v) for k, v in model_sd.items()}
    for param, state in optim_sd["state"].items():
        for kind, t in state.items():
            saved[f"optim.state.{param}.{kind}"] = values(t)
    losses = [step() for _ in range(3)]
    out = {
        "torch": torch.__version__,
        "options": OPTIONS,
        "x": values(x), "y": values(y),
        "saved": saved,
        "losses_after": losses,
        "params_after": {k: values(v) for k, v in model.state_dict().items()},
    }
    with open(os.path.join(HERE, "dcp.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"torch {torch.__version__}: wrote {OUT} and dcp.json")


if __name__ == "__main__":
    main()
