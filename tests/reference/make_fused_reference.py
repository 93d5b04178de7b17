#!/usr/bin/env python3
"""Reference values for the fused optimizers: torch.optim with fused=True on a
CPU (LibTorch >= 2.4 has the fused kernels there too), over the problem of
make_reference.py, its tensors concatenated into one, as trainkit's flat
buffer holds them: on a CPU the fused kernel rounds a vector body and a
scalar tail differently, so the same values laid out per tensor differ in the
last bit (on CUDA every element takes the same path). Needs PyTorch >= 2.4: run it in the Debian 13 root,
  bash scripts/debian13.sh run /usr/bin/python3 /src/tests/reference/make_fused_reference.py
It rewrites fused_optim.json beside this file; the tests compare bit for bit.
With --layout-check it writes nothing and prints how far PyTorch's own fused
CPU kernel moves between the flat and the per-tensor layout of the same values.
"""
import sys

import torch

from make_reference import dump, flat, optimizer_problem, run_optimizer

STEPS = 40


def concat(tensors):
    """The tensors as one flat tensor, as trainkit's flat buffer holds them."""
    return [torch.cat([t.reshape(-1) for t in tensors])]


def fused_reference():
    init, grads = optimizer_problem()
    grads = grads[:STEPS]
    S = torch.optim
    cases = {
        "adamw": (S.AdamW, dict(lr=1e-2, weight_decay=0.01), None),
        "adamw_amsgrad_lr_decay": (S.AdamW, dict(lr=5e-3, weight_decay=0.1, amsgrad=True), 0.97),
        "adam_wd": (S.Adam, dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), None),
        "sgd": (S.SGD, dict(lr=0.1), None),
        "sgd_momentum": (S.SGD, dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3), None),
        "sgd_nesterov": (S.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2), 0.97),
    }
    checkpoints = [1, 10, STEPS]
    out = {"shapes": [list(t.shape) for t in init], "init": flat(init),
           "grads": [flat(gs) for gs in grads], "checkpoints": checkpoints, "cases": {}}
    for name, (cls, kwargs, decay) in cases.items():
        kwargs = dict(kwargs, fused=True)
        snaps = run_optimizer(cls, kwargs, decay, concat(init), [concat(g) for g in grads],
                              checkpoints)
        out["cases"][name] = {"optimizer": cls.__name__, "options": kwargs, "lr_decay": decay,
                              "params": snaps}
    dump("fused_optim.json", out, "make_fused_reference.py")


def layout_check():
    init, grads = optimizer_problem()
    grads = grads[:STEPS]
    for cls, kwargs in [(torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.01, fused=True)),
                        (torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.1,
                                               weight_decay=1e-3, fused=True))]:
        flat = run_optimizer(cls, kwargs, None, concat(init), [concat(g) for g in grads], [STEPS])
        per_tensor = run_optimizer(cls, kwargs, None, init, grads, [STEPS])
        diff = max(abs(a - b) for a, b in zip(flat[0], per_tensor[0]))
        print(f"{cls.__name__}: max |flat - per-tensor| after {STEPS} steps: {diff:.2g}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    if "--layout-check" in sys.argv:
        layout_check()
    else:
        fused_reference()
