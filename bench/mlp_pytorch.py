#!/usr/bin/env python3
"""The tiny MLP (32-64-10, batch 32, AdamW) trained in PyTorch from Python:
the baseline for bench_trainer's steps per second. Same thread count."""
import json
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = [(torch.randn(32, 32), torch.randint(0, 10, (32,))) for _ in range(64)]
steps = 2000


def run():
    start = time.perf_counter()
    for i in range(steps):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


run()  # warm up
times = sorted(run() for _ in range(7))
median = times[len(times) // 2]
print(json.dumps({"bench": "pytorch_python_tiny_mlp", "threads": threads,
                  "torch": torch.__version__, "step_us": round(median * 1e6, 1),
                  "steps_per_s": round(1 / median)}))
