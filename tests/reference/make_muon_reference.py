#!/usr/bin/env python3
"""Reference values for optim::Muon: torch.optim.Muon's step (PyTorch 2.9's
torch/optim/_muon.py, _single_tensor_muon and _zeropower_via_newtonschulz,
followed line by line: PyTorch 2.6 has no torch.optim.Muon) for the matrices
of a "muon" parameter group, torch.optim.AdamW for the default group, 20
steps with every group's rate decayed each step as a scheduler would.

The iteration runs in a chosen dtype: float32 here (the reference's own
bfloat16 rounds each product to 8 bits, which no two BLAS builds share), so
trainkit's fp32 iteration is compared to 1e-6. The one departure, in the
float32 case only: the iteration works on a copy (`.to(dtype, copy=True)`),
as bfloat16() makes one, where float32's .to() would alias a Nesterov-less
update to the momentum buffer and divide the buffer in place.

Run it in the Debian 13 root:
  bash scripts/debian13.sh run /usr/bin/python3 /src/tests/reference/make_muon_reference.py
It rewrites muon.json beside this file. Tensors 0 and 1 (a wide and a tall
matrix) are the muon group; 2 and 3 (a bias and an embedding-like matrix)
the default group, AdamW's. Snapshots list the four tensors in index order.
"""
import math

import torch

from make_reference import dump, flat

STEPS = 20
DECAY = 0.97
SHAPES = [(8, 12), (12, 6), (6,), (10, 4)]
CHECKPOINTS = [1, 5, 20]
A, B, C = 3.4445, -4.7750, 2.0315

CASES = {
    # torch.optim.Muon's defaults but the rate, the records' AdamW beside it
    "nesterov_original": dict(
        muon=dict(lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True,
                  adjust_lr_fn="original", ns_steps=5, eps=1e-7),
        adamw=dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)),
    # plain momentum, Moonshot's rate adjustment, more steps of the iteration
    "momentum_match_rms": dict(
        muon=dict(lr=0.01, weight_decay=0.05, momentum=0.9, nesterov=False,
                  adjust_lr_fn="match_rms_adamw", ns_steps=7, eps=1e-7),
        adamw=dict(lr=1e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0)),
}


def zeropower(grad, steps, eps, dtype):
    x = grad.to(dtype, copy=True)
    if grad.size(0) > grad.size(1):
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(steps):
        gram = x @ x.T
        update = B * gram + C * gram @ gram
        x = A * x + update @ x
    if grad.size(0) > grad.size(1):
        x = x.T
    return x


def adjusted(lr, fn, shape):
    rows, cols = shape[:2]
    ratio = math.sqrt(max(1, rows / cols)) if fn == "original" else 0.2 * math.sqrt(max(rows, cols))
    return lr * ratio


def problem():
    g = torch.Generator().manual_seed(4321)
    init = [torch.randn(s, generator=g) for s in SHAPES]
    grads = []
    for _ in range(STEPS):
        scale = 10.0 ** (torch.rand((), generator=g).item() * 2 - 1)  # 0.1 .. 10
        grads.append([torch.randn(s, generator=g) * scale for s in SHAPES])
    return init, grads


def run(case, init, grads, dtype):
    m, a = case["muon"], case["adamw"]
    tensors = [p.clone() for p in init]
    bufs = [torch.zeros_like(tensors[i]) for i in (0, 1)]
    adam_params = [tensors[2].requires_grad_(True), tensors[3].requires_grad_(True)]
    adamw = torch.optim.AdamW(adam_params, lr=a["lr"], betas=a["betas"], eps=a["eps"],
                              weight_decay=a["weight_decay"], foreach=False)
    snaps = []
    for step, gs in enumerate(grads):
        lr = m["lr"] * DECAY ** step
        adamw.param_groups[0]["lr"] = a["lr"] * DECAY ** step
        with torch.no_grad():
            for k, i in enumerate((0, 1)):
                param, grad, buf = tensors[i], gs[i], bufs[k]
                buf.lerp_(grad, 1 - m["momentum"])
                update = grad.lerp(buf, m["momentum"]) if m["nesterov"] else buf
                update = zeropower(update, m["ns_steps"], m["eps"], dtype)
                param.mul_(1 - lr * m["weight_decay"])
                param.add_(update, alpha=-adjusted(lr, m["adjust_lr_fn"], param.shape))
        for p, i in zip(adam_params, (2, 3)):
            p.grad = gs[i].clone()
        adamw.step()
        if step + 1 in CHECKPOINTS:
            snaps.append(flat(tensors))
    return snaps


def main():
    torch.set_num_threads(1)
    init, grads = problem()
    out = {"shapes": SHAPES, "init": flat(init), "grads": [flat(gs) for gs in grads],
           "checkpoints": CHECKPOINTS, "lr_decay": DECAY,
           "ns_coefficients": [A, B, C], "cases": {}}
    for name, case in CASES.items():
        out["cases"][name] = dict(case, params=run(case, init, grads, torch.float32))
    dump("muon.json", out, script="make_muon_reference.py")


if __name__ == "__main__":
    main()
