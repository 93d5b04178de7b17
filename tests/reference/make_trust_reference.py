#!/usr/bin/env python3
"""Reference values for optim::Lamb and optim::Lars: the papers' algorithms
written per tensor in PyTorch (no library has them: torch.optim does not,
and trainkit's tests download nothing), 20 steps, two parameter groups,
every group's rate decayed each step as a scheduler would.

LAMB: You et al., "Large Batch Optimization for Deep Learning: Training BERT
in 76 minutes" (ICLR 2020), Algorithm 2, with phi the identity and the ratio
1 where either norm is 0 (as NVIDIA's and timm's LAMB).
LARS: You, Gitman and Ginsburg, "Large Batch Training of Convolutional
Networks" (2017), Algorithm 1, with the learning rate outside the momentum
as torch.optim.SGD and timm's Lars have it, and LARC's optional clipping
(the ratio over the rate, at most 1).

Tensors 0, 1, 3 and 4 (two matrices, a 3-d one, and a vector that starts at
zero, whose ratio is 1 until it moves) are the default group, with the trust
ratio and weight decay; tensor 2 (a bias) is the "no_trust_ratio" group,
without either, as the papers leave biases out. Snapshots list the five
tensors in index order.

Run it with any PyTorch (1.13 and 2.6 give the same digits):
  /usr/bin/python3 tests/reference/make_trust_reference.py
It rewrites trust.json beside this file.
"""
import torch

from make_reference import dump, flat

STEPS = 20
DECAY = 0.97
SHAPES = [(8, 12), (12, 6), (6,), (3, 4, 5), (5,)]
TRUST = [True, True, False, True, True]
CHECKPOINTS = [1, 5, 20]

CASES = {
    "lamb": dict(kind="lamb", lr=0.01, beta1=0.9, beta2=0.999, eps=1e-6,
                 weight_decay=0.01, bias_correction=True),
    "lamb_no_bias_correction": dict(kind="lamb", lr=0.02, beta1=0.8, beta2=0.99, eps=1e-8,
                                    weight_decay=0.1, bias_correction=False),
    "lars": dict(kind="lars", lr=0.5, momentum=0.9, dampening=0.0, weight_decay=1e-4,
                 nesterov=False, trust_coefficient=1e-3, eps=1e-8, trust_clip=False),
    "lars_nesterov_clip": dict(kind="lars", lr=2.0, momentum=0.9, dampening=0.0,
                               weight_decay=5e-4, nesterov=True, trust_coefficient=0.02,
                               eps=1e-8, trust_clip=True),
}


def problem():
    g = torch.Generator().manual_seed(2468)
    init = [torch.randn(s, generator=g) for s in SHAPES]
    init[4].zero_()
    grads = []
    for _ in range(STEPS):
        scale = 10.0 ** (torch.rand((), generator=g).item() * 2 - 1)  # 0.1 .. 10
        grads.append([torch.randn(s, generator=g) * scale for s in SHAPES])
    return init, grads


def one_where_zero(ratio, a, b):
    return torch.where((a > 0) & (b > 0), ratio, torch.ones_like(ratio))


def lamb_step(c, p, grad, state, lr, trust, wd):
    state["t"] += 1
    t = state["t"]
    m, v = state["m"], state["v"]
    m.mul_(c["beta1"]).add_(grad, alpha=1 - c["beta1"])
    v.mul_(c["beta2"]).addcmul_(grad, grad, value=1 - c["beta2"])
    bc1 = 1 - c["beta1"] ** t if c["bias_correction"] else 1.0
    bc2 = 1 - c["beta2"] ** t if c["bias_correction"] else 1.0
    update = (m / bc1) / ((v / bc2).sqrt() + c["eps"])
    if wd != 0:
        update.add_(p, alpha=wd)
    if not trust:
        p.add_(update, alpha=-lr)
        return
    w, u = p.norm(), update.norm()
    p.addcmul_(update, one_where_zero(w / u, w, u), value=-lr)


def lars_step(c, p, grad, state, lr, trust, wd):
    d = grad.add(p, alpha=wd)
    if trust:
        w, g = p.norm(), grad.norm()
        ratio = one_where_zero(c["trust_coefficient"] * w / (g + w * wd + c["eps"]), w, g)
        if c["trust_clip"]:
            ratio = torch.clamp(ratio / lr, max=1.0)
        d.mul_(ratio)
    if c["momentum"] != 0:
        if state["t"] == 0:
            state["buf"] = d.clone()
        else:
            state["buf"].mul_(c["momentum"]).add_(d, alpha=1 - c["dampening"])
        d = d.add(state["buf"], alpha=c["momentum"]) if c["nesterov"] else state["buf"]
    state["t"] += 1
    p.add_(d, alpha=-lr)


def run(c, init, grads):
    tensors = [p.clone() for p in init]
    states = [dict(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p)) for p in tensors]
    step_fn = lamb_step if c["kind"] == "lamb" else lars_step
    snaps = []
    for step, gs in enumerate(grads):
        lr = c["lr"] * DECAY ** step
        with torch.no_grad():
            for p, grad, state, trust in zip(tensors, gs, states, TRUST):
                step_fn(c, p, grad, state, lr, trust, c["weight_decay"] if trust else 0.0)
        if step + 1 in CHECKPOINTS:
            snaps.append(flat(tensors))
    return snaps


def main():
    torch.set_num_threads(1)
    init, grads = problem()
    out = {"shapes": SHAPES, "trust": TRUST, "init": flat(init),
           "grads": [flat(gs) for gs in grads], "checkpoints": CHECKPOINTS,
           "lr_decay": DECAY, "cases": {}}
    for name, case in CASES.items():
        out["cases"][name] = dict(case, params=run(case, init, grads))
    dump("trust.json", out, script="make_trust_reference.py")


if __name__ == "__main__":
    main()
