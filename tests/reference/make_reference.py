#!/usr/bin/env python3
"""Reference values for trainkit's parity tests, computed by PyTorch itself.

Run with Debian's PyTorch (python3-torch): /usr/bin/python3 make_reference.py
It rewrites optim.json, sched.json, scaler.json and sampler.json beside this file. The test
suite reads those files and never needs Python.
"""
import json
import math
import pathlib

import torch

HERE = pathlib.Path(__file__).resolve().parent
STEPS = 120
SHAPES = [(7, 5), (5,), (3, 4, 2), (1,)]


def dump(name, payload, script="make_reference.py"):
    payload["generator"] = f"tests/reference/{script}, torch {torch.__version__}"
    (HERE / name).write_text(json.dumps(payload, indent=None, separators=(",", ":")) + "\n")


def flat(tensors):
    return [float(v) for t in tensors for v in t.detach().reshape(-1).tolist()]


def optimizer_problem():
    """Initial parameters and STEPS steps of gradients (also make_fused_reference.py's)."""
    g = torch.Generator().manual_seed(1234)
    init = [torch.randn(s, generator=g) for s in SHAPES]
    grads = []
    for step in range(STEPS):
        scale = 10.0 ** (torch.rand((), generator=g).item() * 3 - 2)  # 0.01 .. 10
        gs = [torch.randn(s, generator=g) * scale for s in SHAPES]
        if step % 17 == 5:
            gs[1].zero_()  # a parameter whose gradient is exactly zero this step
        grads.append(gs)
    return init, grads


def run_optimizer(cls, kwargs, decay, init, grads, checkpoints):
    """The parameters after each checkpoint step, flattened."""
    params = [p.clone().requires_grad_(True) for p in init]
    opt = cls(params, **kwargs)
    snaps = []
    for step in range(len(grads)):
        if decay is not None:
            for group in opt.param_groups:
                group["lr"] = kwargs["lr"] * decay ** step
        for p, gr in zip(params, grads[step]):
            p.grad = gr.clone()
        opt.step()
        if step + 1 in checkpoints:
            snaps.append(flat(params))
    return snaps


def optimizer_reference():
    init, grads = optimizer_problem()

    S = torch.optim
    cases = {
        "sgd": (S.SGD, dict(lr=0.1), None),
        "sgd_momentum": (S.SGD, dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3), None),
        "sgd_nesterov": (S.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2), None),
        "sgd_maximize": (S.SGD, dict(lr=0.01, momentum=0.5, maximize=True), None),
        "adam": (S.Adam, dict(lr=1e-2), None),
        "adam_wd_amsgrad": (S.Adam, dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                                         amsgrad=True), None),
        "adamw": (S.AdamW, dict(lr=1e-2, weight_decay=0.01), None),
        "adamw_amsgrad": (S.AdamW, dict(lr=5e-3, weight_decay=0.1, amsgrad=True), None),
        # the learning rate changes every step, as a scheduler would
        "adamw_lr_decay": (S.AdamW, dict(lr=2e-2, weight_decay=0.05), 0.97),
    }
    checkpoints = [1, 10, 50, 100, STEPS]
    out = {"shapes": SHAPES, "init": flat(init), "grads": [flat(gs) for gs in grads],
           "checkpoints": checkpoints, "cases": {}}
    for name, (cls, kwargs, decay) in cases.items():
        snaps = run_optimizer(cls, kwargs, decay, init, grads, checkpoints)
        out["cases"][name] = {"optimizer": cls.__name__, "options": kwargs, "lr_decay": decay,
                              "params": snaps}
    dump("optim.json", out)


def scheduler_reference():
    L = torch.optim.lr_scheduler

    def run(make_opt, make_sched, steps):
        opt = make_opt()
        sched = make_sched(opt)
        lrs, moms = [], []
        for _ in range(steps + 1):
            group = opt.param_groups[0]
            lrs.append(group["lr"])
            moms.append(group["betas"][0] if "betas" in group else group.get("momentum", 0.0))
            opt.step()
            if len(lrs) <= steps:
                sched.step()
        return lrs, moms

    def sgd(lr=0.1, momentum=0.9):
        return lambda: torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr,
                                       momentum=momentum)

    def adam(lr=1e-3):
        return lambda: torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=lr)

    T = STEPS
    cases = {
        "constant": (sgd(), lambda o: L.ConstantLR(o, factor=0.5, total_iters=10), {}),
        "step": (sgd(), lambda o: L.StepLR(o, step_size=7, gamma=0.5), {}),
        "multi_step": (sgd(), lambda o: L.MultiStepLR(o, milestones=[10, 25, 60], gamma=0.3), {}),
        "exponential": (sgd(), lambda o: L.ExponentialLR(o, gamma=0.97), {}),
        "cosine": (sgd(), lambda o: L.CosineAnnealingLR(o, T_max=50, eta_min=1e-4), {}),
        "warmup_cosine": (sgd(), lambda o: L.SequentialLR(
            o, [L.LinearLR(o, start_factor=0.01, end_factor=1.0, total_iters=10),
                L.CosineAnnealingLR(o, T_max=T - 10, eta_min=1e-5)], milestones=[10]), {}),
        "linear_warmup": (sgd(), lambda o: L.LinearLR(o, start_factor=0.25, end_factor=1.0,
                                                      total_iters=40), {}),
        "linear_decay": (sgd(), lambda o: L.LinearLR(o, start_factor=1.0, end_factor=0.05,
                                                     total_iters=T), {}),
        "one_cycle": (sgd(), lambda o: L.OneCycleLR(o, max_lr=0.5, total_steps=T), {}),
        "one_cycle_linear_three_phase": (sgd(), lambda o: L.OneCycleLR(
            o, max_lr=0.3, total_steps=T, pct_start=0.25, anneal_strategy="linear",
            three_phase=True, div_factor=10.0, final_div_factor=100.0, base_momentum=0.8,
            max_momentum=0.9), {}),
        "one_cycle_adam": (adam(), lambda o: L.OneCycleLR(o, max_lr=1e-2, total_steps=T), {}),
    }
    out = {"steps": T, "cases": {}}
    for name, (make_opt, make_sched, _) in cases.items():
        lrs, moms = run(make_opt, make_sched, T)
        out["cases"][name] = {"lr": lrs, "momentum": moms}
    dump("sched.json", out)


def scaler_reference():
    """Scale trajectory of GradScaler's update rule (torch/cuda/amp/grad_scaler.py,
    kernel _amp_update_scale_) over a planted pattern of inf/NaN steps. LibTorch 1.13
    has that kernel for CUDA only, so it is restated here line by line:
      found_inf: scale *= backoff; tracker = 0
      else: tracker += 1; if tracker == interval: scale *= growth (if finite); tracker = 0
    """
    init, growth, backoff, interval = 2.0 ** 16, 2.0, 0.5, 3
    pattern = [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
               0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    scale = torch.tensor([init], dtype=torch.float32)
    tracker = 0
    scales, trackers = [], []
    for bad in pattern:
        if bad:
            scale = scale * backoff
            tracker = 0
        else:
            tracker += 1
            if tracker == interval:
                grown = scale * growth
                if math.isfinite(grown.item()):
                    scale = grown
                tracker = 0
        scales.append(scale.item())
        trackers.append(tracker)
    # growth until float32 overflow: the scale must stop at the largest finite power of two
    big = torch.tensor([2.0 ** 126], dtype=torch.float32)
    capped = []
    for _ in range(4):
        grown = big * 2.0
        if math.isfinite(grown.item()):
            big = grown
        capped.append(big.item())
    dump("scaler.json", {"init_scale": init, "growth_factor": growth, "backoff_factor": backoff,
                         "growth_interval": interval, "found_inf": pattern, "scale": scales,
                         "growth_tracker": trackers, "overflow_cap": capped})


def sampler_reference():
    """Shards of torch.utils.data.DistributedSampler for a few layouts."""
    from torch.utils.data import DistributedSampler
    cases = []
    for n, world, shuffle, drop_last, seed, epoch in [
            (10, 3, True, False, 0, 0), (10, 3, True, False, 0, 1), (11, 2, True, True, 7, 3),
            (10, 4, False, False, 0, 0), (10, 4, False, True, 0, 0), (2, 5, True, False, 1, 0),
            (1000, 3, True, False, 42, 5)]:
        shards = []
        for rank in range(world):
            sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle,
                                         seed=seed, drop_last=drop_last)
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
        cases.append({"size": n, "world_size": world, "shuffle": shuffle, "drop_last": drop_last,
                      "seed": seed, "epoch": epoch, "shards": shards})
    dump("sampler.json", {"distributed": cases})


if __name__ == "__main__":
    torch.set_num_threads(1)
    optimizer_reference()
    scheduler_reference()
    scaler_reference()
    sampler_reference()
