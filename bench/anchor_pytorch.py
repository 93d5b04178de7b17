#!/usr/bin/env python3
"""The CPU anchor: the tiny MLP (32-64-10, batch 32) and the demo's CNN
(glyph-shaped 1x28x28 input, batch 64) trained with AdamW from Python in the
four ways a PyTorch 2.x user would make fastest: eager with foreach AdamW,
eager with fused AdamW, torch.compile(model), and torch.compile of the model
and the whole optimizer step. Prints one JSON line per model and way, with
steps/s and, for the compiled ways, the compile time. Run it with 1 thread
beside `bench_trainer --anchor` (bench/anchor.sh)."""
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)


class SmallCnn(nn.Module):  # examples/models.hpp's SmallCnn
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def tiny_mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


MODELS = {  # name: (constructor, input shape of one batch, steps per timing)
    "tiny_mlp": (tiny_mlp, (32, 32), 2000),
    "demo_cnn": (SmallCnn, (64, 1, 28, 28), 60),
}


def make(way, build):
    torch.manual_seed(0)
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=way != "eager_fused",
                            fused=True if way == "eager_fused" else None)
    forward = torch.compile(model) if way.startswith("compile") else model

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(forward(x), y).backward()
        opt.step()

    if way == "compile_model_and_step":
        opt_step = torch.compile(opt.step)

        def step(x, y):  # noqa: F811 (the compiled optimizer step replaces the eager one)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(forward(x), y).backward()
            opt_step()

    return step


def measure(name, way):
    build, shape, steps = MODELS[name]
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(shape, generator=gen), torch.randint(0, 10, (shape[0],), generator=gen))
               for _ in range(16)]
    step = make(way, build)
    start = time.perf_counter()
    for x, y in batches[:3]:  # the first calls compile
        step(x, y)
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for i in range(steps):
            step(*batches[i % len(batches)])
        times.append((time.perf_counter() - start) / steps)
    median = sorted(times)[len(times) // 2]
    print(json.dumps({"bench": "anchor_pytorch", "model": name, "way": way, "threads": threads,
                      "torch": torch.__version__, "step_us": round(median * 1e6, 1),
                      "steps_per_s": round(1 / median, 1),
                      "warmup_and_compile_s": round(compile_s, 2)}), flush=True)


WAYS = ["eager_foreach", "eager_fused", "compile_model", "compile_model_and_step"]
if __name__ == "__main__":
    for model_name in sys.argv[2:] or MODELS:
        for w in WAYS:
            try:
                measure(model_name, w)
            except Exception as e:  # a way this PyTorch cannot run is reported, not fatal
                print(json.dumps({"bench": "anchor_pytorch", "model": model_name, "way": w,
                                  "error": " | ".join(str(e).strip().splitlines()[-3:])[:300]}),
                      flush=True)
