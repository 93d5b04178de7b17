#!/usr/bin/env python3
"""Reference values for optim::ScheduleFreeAdamW: the authors' AdamWScheduleFree
step (Defazio et al., "The Road Less Scheduled", 2024; the per-tensor loop of
facebookresearch/schedule_free's adamw_schedulefree.py), written out here
since Debian has no schedulefree package and trainkit's tests download
nothing. 20 steps, two parameter groups, every group's rate decayed each step
as a scheduler would (the step's own warm-up and lr_max on top).

Per group, with k its steps so far:
  lr = group_lr * min(1, (k + 1) / warmup_steps) * sqrt(1 - beta2^(k + 1))
  lr_max = max(lr, lr_max); weight = (k + 1)^r * lr_max^weight_lr_power
  weight_sum += weight; ckp1 = weight / weight_sum (0 if weight_sum is 0)
Per tensor y (the parameter) with gradient g, state z (y at its first step)
and v:
  v = beta2 v + (1 - beta2) g^2; d = g / (sqrt(v) + eps) + weight_decay y
  y = lerp(y, z, ckp1) + lr (beta1 (1 - ckp1) - 1) d; z = z - lr d
The evaluation weights (the authors' eval()): x = lerp(y, z, 1 - 1 / beta1).

Tensors 0, 1, 3 and 4 are the default group; tensor 2 (a bias) is the
"bias" group with its own rate (lr_scale times the default's) and no weight
decay. Snapshots list the five tensors in index order: "params" (y) and
"evaluation" (x) after each checkpoint step.

Run it with any PyTorch (1.13 and 2.6 give the same digits):
  /usr/bin/python3 tests/reference/make_schedule_free_reference.py
It rewrites schedule_free.json beside this file.
"""
import math

import torch

from make_reference import dump, flat

STEPS = 20
DECAY = 0.97
SHAPES = [(8, 12), (12, 6), (6,), (3, 4, 5), (5,)]
BIAS = 2
CHECKPOINTS = [1, 5, 20]

CASES = {
    "warmup": dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
                   warmup_steps=5, r=0.0, weight_lr_power=2.0, bias_lr_scale=2.0),
    "polynomial_average": dict(lr=0.005, beta1=0.95, beta2=0.99, eps=1e-6, weight_decay=0.1,
                               warmup_steps=0, r=1.0, weight_lr_power=1.0, bias_lr_scale=0.5),
}


def problem():
    g = torch.Generator().manual_seed(97531)
    init = [torch.randn(s, generator=g) for s in SHAPES]
    grads = []
    for _ in range(STEPS):
        scale = 10.0 ** (torch.rand((), generator=g).item() * 2 - 1)  # 0.1 .. 10
        grads.append([torch.randn(s, generator=g) * scale for s in SHAPES])
    return init, grads


def run(c, init, grads):
    ys = [p.clone() for p in init]
    state = [dict() for _ in ys]
    groups = [dict(lr=c["lr"], decay=c["weight_decay"], members=[0, 1, 3, 4]),
              dict(lr=c["lr"] * c["bias_lr_scale"], decay=0.0, members=[BIAS])]
    for group in groups:
        group.update(k=0, lr_max=-1.0, weight_sum=0.0)
    beta1, beta2, eps = c["beta1"], c["beta2"], c["eps"]
    params, evaluation = [], []
    for step, gs in enumerate(grads):
        for group in groups:
            k = group["k"]
            sched = (k + 1) / c["warmup_steps"] if k < c["warmup_steps"] else 1.0
            lr = group["lr"] * DECAY ** step * sched * math.sqrt(1 - beta2 ** (k + 1))
            lr_max = group["lr_max"] = max(lr, group["lr_max"])
            weight = ((k + 1) ** c["r"]) * (lr_max ** c["weight_lr_power"])
            weight_sum = group["weight_sum"] = group["weight_sum"] + weight
            ckp1 = weight / weight_sum if weight_sum != 0 else 0.0
            with torch.no_grad():
                for i in group["members"]:
                    y, grad, st = ys[i], gs[i].clone(), state[i]
                    if "z" not in st:
                        st["z"] = y.clone()
                        st["v"] = torch.zeros_like(y)
                    z, v = st["z"], st["v"]
                    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    denom = v.sqrt().add_(eps)
                    d = grad.div_(denom)
                    if group["decay"] != 0:
                        d.add_(y, alpha=group["decay"])
                    y.lerp_(end=z, weight=ckp1)
                    y.add_(d, alpha=lr * (beta1 * (1 - ckp1) - 1))
                    z.sub_(d, alpha=lr)
            group["k"] = k + 1
        if step + 1 in CHECKPOINTS:
            params.append(flat(ys))
            evaluation.append(flat([y.lerp(st["z"], 1 - 1 / beta1) for y, st in zip(ys, state)]))
    return params, evaluation


def main():
    torch.set_num_threads(1)
    init, grads = problem()
    out = {"shapes": SHAPES, "bias": BIAS, "init": flat(init),
           "grads": [flat(gs) for gs in grads], "checkpoints": CHECKPOINTS,
           "lr_decay": DECAY, "cases": {}}
    for name, case in CASES.items():
        params, evaluation = run(case, init, grads)
        out["cases"][name] = dict(case, params=params, evaluation=evaluation)
    dump("schedule_free.json", out, script="make_schedule_free_reference.py")


if __name__ == "__main__":
    main()
