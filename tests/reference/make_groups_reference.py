#!/usr/bin/env python3
"""Reference values for parameter groups: torch.optim with two and three
param_groups over make_reference.py's problem (four tensors, indices 0..3),
each group's learning rate decayed every step as a scheduler would.

For every case, two trajectories:
  "params": torch.optim's default step (per tensor, foreach off on CPUs),
    which trainkit's own kernels match to 1e-6 relative (as optim.json);
  "fused_params": fused=True with each group's tensors concatenated into one,
    as trainkit's flat buffer of that group holds them (make_fused_reference.py
    says why the layout matters on a CPU); trainkit's fused path matches it bit
    for bit. Needs PyTorch >= 2.4: run it in the Debian 13 root,
  bash scripts/debian13.sh run /usr/bin/python3 /src/tests/reference/make_groups_reference.py
It rewrites groups_optim.json beside this file. Snapshots list the four
tensors' values in index order. The default group is the tensors no other
group lists, in index order, as trainkit's default group holds them.
"""
import torch

from make_reference import dump, flat, optimizer_problem

STEPS = 40
DECAY = 0.97

S = torch.optim
CASES = {
    # nanoGPT's split: no weight decay for the 1-d tensors, at half the rate
    "adamw_2_groups": (S.AdamW, dict(lr=1e-2, weight_decay=0.1),
                       [dict(params=[1, 3], weight_decay=0.0, lr=5e-3)]),
    "adam_3_groups": (S.Adam, dict(lr=1e-2),
                      [dict(params=[2], betas=(0.8, 0.99), eps=1e-6, amsgrad=True,
                            weight_decay=0.05),
                       dict(params=[1, 3], lr=2e-2)]),
    "sgd_3_groups": (S.SGD, dict(lr=0.05, momentum=0.9),
                     [dict(params=[2], nesterov=True, weight_decay=1e-2),
                      dict(params=[1, 3], momentum=0.5, dampening=0.1, lr=0.1)]),
}


def layout(groups, n):
    """Tensor indices per group, the default group (the rest) first."""
    listed = [i for g in groups for i in g["params"]]
    return [[i for i in range(n) if i not in listed]] + [g["params"] for g in groups]


def run(cls, kwargs, groups, init, grads, fused):
    parts = layout(groups, len(init))
    if fused:  # one flat tensor per group
        tensors = [torch.cat([init[i].reshape(-1) for i in part]).requires_grad_(True)
                   for part in parts]
        grad_of = lambda gs: [torch.cat([gs[i].reshape(-1) for i in part]) for part in parts]
        kwargs = dict(kwargs, fused=True)
        param_groups = [dict(params=[t]) for t in tensors]
    else:
        tensors = [p.clone().requires_grad_(True) for p in init]
        grad_of = lambda gs: gs
        param_groups = [dict(params=[tensors[i] for i in part]) for part in parts]
    for pg, g in zip(param_groups[1:], groups):
        pg.update({k: v for k, v in g.items() if k != "params"})
    opt = cls(param_groups, **kwargs)
    base = [pg["lr"] for pg in opt.param_groups]
    snaps = []
    for step, gs in enumerate(grads):
        for pg, lr in zip(opt.param_groups, base):
            pg["lr"] = lr * DECAY ** step
        for t, g in zip(tensors, grad_of(gs)):
            t.grad = g.clone()
        opt.step()
        if step + 1 in CHECKPOINTS:
            if fused:  # back to the tensors' index order
                values = [None] * len(init)
                for part, t in zip(parts, tensors):
                    offset = 0
                    for i in part:
                        values[i] = t.detach()[offset:offset + init[i].numel()]
                        offset += init[i].numel()
                snaps.append(flat(values))
            else:
                snaps.append(flat(tensors))
    return snaps


CHECKPOINTS = [1, 10, STEPS]


def main():
    init, grads = optimizer_problem()
    grads = grads[:STEPS]
    out = {"shapes": [list(t.shape) for t in init], "init": flat(init),
           "grads": [flat(gs) for gs in grads], "checkpoints": CHECKPOINTS, "lr_decay": DECAY,
           "cases": {}}
    for name, (cls, kwargs, groups) in CASES.items():
        out["cases"][name] = {
            "optimizer": cls.__name__, "options": kwargs, "groups": groups,
            "params": run(cls, kwargs, groups, init, grads, fused=False),
            "fused_params": run(cls, kwargs, groups, init, grads, fused=True)}
    dump("groups_optim.json", out, "make_groups_reference.py")


if __name__ == "__main__":
    main()
