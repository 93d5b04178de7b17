#!/usr/bin/env python3
"""The GPU benchmarks' table: trainkit's lines (bench_gpu) and PyTorch's
(gpu_pytorch.py) per case, with each row's speed as a ratio of the fastest
PyTorch way on the same GPU in the same run (higher is faster), and where
a profile ran (bench_gpu on CUDA, gpu_pytorch.py --profile) the kernels'
summed time per step: the step's limit when nothing waits between kernels.

  gpu_compare.py TRAINKIT.jsonl PYTORCH.jsonl [PYTORCH.jsonl ...]
"""
import json
import sys


def load(path):
    with open(path) as f:
        # other JSON lines come through too (Inductor's autotuning statistics)
        lines = [json.loads(line) for line in f if line.startswith("{")]
    return [r for r in lines if "bench" in r and "case" in r]


def loader_table(trainkit, pytorch):
    """The data-serving case: trainkit's loader against DataLoader, the same
    workers and pinning, feeding the same model; workers -1 is the model
    alone (batches already in device memory)."""
    print("\n| workers | pinned | trainkit ms/step | DataLoader ms/step | trainkit vs DataLoader "
          "| trainkit samples/s |")
    print("|---|---|---|---|---|---|")
    theirs = {(r["workers"], r["pin_memory"]): r for r in pytorch}
    for r in trainkit:
        key = (r["workers"], r["pin_memory"])
        other = theirs.get(key)
        ratio = f"{other['ms_per_step'] / r['ms_per_step']:.2f}x" if other else "-"
        them = f"{other['ms_per_step']:.3f}" if other else "-"
        workers = "model alone" if key[0] < 0 else key[0]
        pinned = "-" if key[0] < 0 else ("yes" if key[1] else "no")
        print(f"| {workers} | {pinned} | {r['ms_per_step']:.3f} | {them} | {ratio} "
              f"| {r['samples_per_s']:.0f} |")


def main():
    trainkit, pytorch = load(sys.argv[1]), [r for path in sys.argv[2:] for r in load(path)]
    is_loader = lambda r: r["case"] == "loader"
    loaders = [r for r in trainkit if is_loader(r)], [r for r in pytorch if is_loader(r)]
    trainkit = [r for r in trainkit if not is_loader(r)]
    pytorch = [r for r in pytorch if not is_loader(r)]
    keys = sorted({(r["case"], r["precision"]) for r in trainkit + pytorch})
    print("| case | precision | contender | ms/step | kernels ms/step | samples/s "
          "| vs fastest PyTorch | MFU | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case, precision in keys:
        rows = [("trainkit " + r["mode"], r) for r in trainkit
                if (r["case"], r["precision"]) == (case, precision)]
        rows += [("PyTorch " + r["way"], r) for r in pytorch
                 if (r["case"], r["precision"]) == (case, precision)]
        timed = [r["ms_per_step"] for name, r in rows if name.startswith("PyTorch") and "ms_per_step" in r]
        fastest = min(timed) if timed else None
        for name, r in rows:
            if "ms_per_step" not in r:
                print(f"| {case} | {precision} | {name} | - | - | - | - | - | {r.get('error', '')} |")
                continue
            ratio = f"{fastest / r['ms_per_step']:.2f}x" if fastest else "-"
            mfu = f"{r['mfu']:.3f}" if "mfu" in r else "-"
            note = r.get("graph", "") if name.startswith("trainkit") else (
                f"compile {r['compile_s']} s" if "compile_s" in r else "")
            if note == "recorded":
                note = ""
            kernels = f"{r['kernels_ms']:.3f}" if "kernels_ms" in r else "-"
            print(f"| {case} | {precision} | {name} | {r['ms_per_step']:.3f} | {kernels} | "
                  f"{r['samples_per_s']:.0f} | {ratio} | {mfu} | {note} |")
    if loaders[0]:
        loader_table(*loaders)


if __name__ == "__main__":
    main()
