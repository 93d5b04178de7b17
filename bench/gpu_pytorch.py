#!/usr/bin/env python3
"""PyTorch's side of the GPU benchmarks (bench/bench_gpu.cpp has trainkit's):
the same cases (ResNet-10 on CIFAR-10-shaped synthetic data at batch
2048 with AdamW + OneCycle in fp16 and bf16; the tiny MLP 32-64-10 at batch
32; two transformer encoder blocks at batch 8; examples/gpt.hpp's GPT at two
sizes, trained as examples/gpt.cpp trains it; the data-serving case, where
DataLoader reads and augments files in its workers), trained the ways a PyTorch
2.x user makes fastest: eager with foreach AdamW, eager with fused AdamW,
torch.compile in its default, "reduce-overhead" (CUDA graphs) and
"max-autotune-no-cudagraphs" modes (fused AdamW), and Lightning's Trainer
with its usual settings where Lightning is installed. AMP (autocast +
GradScaler for fp16), cudnn.benchmark and channels_last for the ResNet.
Prints one JSON line per case and way: ms per step, samples/s, MFU when
--peak-flops is given, and for compiled ways the compile time (the first
steps' time beyond steady steps).

  gpu_pytorch.py [--device cuda|cpu] [--cases resnet10,mlp,transformer,gpt,loader]
                 [--ways eager,fused,compile,reduce-overhead,max-autotune,lightning]
                 [--steps N] [--batch-scale F] [--peak-flops F] [--profile]
                 [--loader-dir DIR]

The loader case runs eager with fused AdamW whatever --ways says: it
measures DataLoader (0, 2, 4, 8 workers, pinned memory on and off), not the
model.

--profile adds, for each way, the kernels' summed duration per step from a
profile of 3 more steps (the step's limit when nothing waits between
kernels), by kind (bench/bench_gpu.cpp's kernel_kind, same rules).
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNet10(nn.Module):  # bench_gpu.cpp's ResNet10
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(64)
        self.blocks = nn.Sequential(BasicBlock(64, 64, 1), BasicBlock(64, 128, 2),
                                    BasicBlock(128, 256, 2), BasicBlock(256, 512, 2))
        self.fc = nn.Linear(512, 10)

    def forward(self, x):
        y = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


class SmallTransformer(nn.Module):  # bench_gpu.cpp's SmallTransformer
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc(self.encoder(x.transpose(0, 1)).mean(0))


class GptConfig:  # examples/gpt.hpp's GptConfig
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        self.vocab_size, self.block_size = vocab_size, block_size
        self.n_layer, self.n_head, self.n_embd = n_layer, n_head, n_embd


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)

    def forward(self, x, allowed):
        B, T, C = x.shape
        D = C // self.n_head
        q, k, v = self.c_attn(x).split(C, 2)
        q, k, v = (t.view(B, T, self.n_head, D).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # as examples/gpt.hpp
        return self.c_proj(out.transpose(1, 2).contiguous().view(B, T, C))


class GptBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = nn.Sequential(nn.Linear(c.n_embd, 4 * c.n_embd), nn.GELU(),
                                 nn.Linear(4 * c.n_embd, c.n_embd))

    def forward(self, x, allowed):
        x = x + self.attn(self.ln_1(x), allowed)
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):  # examples/gpt.hpp's Gpt
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd)
        self.h = nn.ModuleList([GptBlock(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd)

    def forward(self, tokens, mask):
        T = tokens.size(1)
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
        allowed = causal.view(1, 1, T, T).logical_and(mask.view(-1, 1, 1, T))
        for block in self.h:
            x = block(x, allowed)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head

    def flops_per_token(self):
        """nanoGPT's estimate (bench_gpu.cpp's gpt_flops_per_token)."""
        c = self.config
        n = sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()
        return 6 * n + 12 * c.n_layer * c.n_head * (c.n_embd // c.n_head) * c.block_size


GPTS = {  # bench_gpu.cpp's: examples/gpt.cpp's default, nanoGPT's Shakespeare-character
    "gpt": (GptConfig(32, 64, 4, 4, 128), 32),
    "gpt_char": (GptConfig(65, 256, 6, 6, 384), 32),
}


def tiny_mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def cases(args):
    scale = lambda b: max(2, int(b * args.batch_scale))
    out = []
    if "resnet10" in args.cases:
        for p in ("fp16", "bf16") if args.device == "cuda" else ("bf16",):
            out.append(("resnet10", p, ResNet10, (scale(2048), 3, 32, 32), True))
    if "mlp" in args.cases:
        out.append(("mlp", "fp32", tiny_mlp, (32, 32), False))
    if "transformer" in args.cases:
        out.append(("transformer", "fp32", SmallTransformer, (8, 32, 128), False))
    return out


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def train_flops_per_sample(model, example):
    from torch.utils.flop_counter import FlopCounterMode
    model = model.to(example.device)  # Lightning hands the module back on the CPU
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(example)
    return 3.0 * counter.get_total_flops()  # forward + backward (2x)


def kernel_kind(name):
    """The kind of a CUDA kernel by its name (same rules as bench_gpu.cpp)."""
    n = name.lower()
    for kind, keys in (("batch norm", ("batch_norm", "batchnorm", "bn_", "welford", "layers::detail::cuda")),
                       ("optimizer", ("adam", "multi_tensor", "foreach")),
                       ("conv/gemm", ("conv", "gemm", "xmma", "cutlass", "cudnn", "sm90_", "wgrad", "dgrad")),
                       ("fused (triton)", ("triton",)),
                       ("reduce", ("reduce",)),
                       ("elementwise", ("elementwise", "vectorized", "unrolled"))):
        if any(k in n for k in keys):
            return kind
    return "other"


def profile_kernels(step, device, steps=3):
    """Summed kernel time per step, in ms, in total and by kind."""
    from torch.profiler import ProfilerActivity, profile
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            step(i)
        sync(device)
    kinds = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kernel_kind(e.name)
            kinds[k] = kinds.get(k, 0.0) + e.time_range.elapsed_us() / 1e3 / steps
    return {"kernels_ms": round(sum(kinds.values()), 4),
            "kernel_kinds_ms": {k: round(v, 4) for k, v in sorted(kinds.items())}}


def plain(way, name, precision, build, shape, channels_last, args):
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build().to(device)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-4,
                            foreach=way == "eager", fused=way != "eager" or None)
    total = 5 + args.steps
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=total + 10,
                                                cycle_momentum=False)
    forward = model
    if way == "compile":
        forward = torch.compile(model)
    elif way in ("reduce-overhead", "max-autotune-no-cudagraphs"):
        forward = torch.compile(model, mode=way)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    xs = [torch.randn(shape, device=device).contiguous(memory_format=fmt) for _ in range(4)]
    ys = [torch.randint(0, 10, (shape[0],), device=device) for _ in range(4)]

    def step(i):
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.cross_entropy(forward(xs[i % 4]), ys[i % 4])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sched.step()

    per_step, result = timed(step, way, device, args)
    return per_step, result, model, xs[0][:1]


def gpt(way, name, args):
    """examples/gpt.cpp's step: two micro-batches (each loss halved), clip at
    norm 1, AdamW (0.9, 0.95; weight decay 0.1 on matrices only), warm-up +
    cosine, bf16 autocast; full-length random token batches."""
    device = torch.device(args.device)
    config, micro = GPTS[name]
    micro = max(2, int(micro * args.batch_scale))
    torch.manual_seed(0)
    model = Gpt(config).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-3,
                            betas=(0.9, 0.95), foreach=way == "eager",
                            fused=way != "eager" or None)
    total = 5 + args.steps + 3
    L = torch.optim.lr_scheduler
    sched = L.SequentialLR(opt, [L.LinearLR(opt, start_factor=0.05, total_iters=5),
                                 L.CosineAnnealingLR(opt, T_max=total - 5, eta_min=1e-4)],
                           milestones=[5])
    forward = model
    if way == "compile":
        forward = torch.compile(model)
    elif way in ("reduce-overhead", "max-autotune-no-cudagraphs"):
        forward = torch.compile(model, mode=way)
    T, V = config.block_size, config.vocab_size
    batches = [(torch.randint(0, V, (micro, T), device=device),
                torch.randint(0, V, (micro, T), device=device)) for _ in range(4)]
    mask = torch.ones(micro, T, dtype=torch.bool, device=device)

    # CUDA graph trees cannot accumulate gradients over micro-batches (the
    # second backward overwrites the first's outputs): reduce-overhead trains
    # on the two micro-batches as one batch, the same mean loss and gradient.
    micro_batches = 1 if way == "reduce-overhead" else 2
    if micro_batches == 1:
        batches = [tuple(torch.cat([a, b]) for a, b in zip(batches[k], batches[k + 1]))
                   for k in (0, 2)] * 2
        mask = torch.cat([mask, mask])

    def step(i):
        for m in range(micro_batches):
            tokens, targets = batches[(micro_batches * i + m) % 4]
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = forward(tokens, mask)
                loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
            (loss / micro_batches).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()

    per_step, result = timed(step, way, device, args)
    line = {"batch": 2 * micro, "ms_per_step": round(per_step * 1e3, 4),
            "samples_per_s": round(2 * micro / per_step, 1),
            "tokens_per_s": round(2 * micro * T / per_step, 1), **result}
    if args.peak_flops > 0:
        line["mfu"] = round(model.flops_per_token() * 2 * micro * T / per_step / args.peak_flops, 4)
    return line


def timed(step, way, device, args):
    """Seconds per step after 5 warm-up steps, and the compile time and kernel
    profile where they apply."""
    sync(device)
    t0 = time.perf_counter()
    for i in range(5):
        step(i)
    sync(device)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(i)
    sync(device)
    per_step = (time.perf_counter() - t0) / args.steps
    result = {"compile_s": round(first - 5 * per_step, 2)} if "compile" in way or "overhead" in way \
        or "autotune" in way else {}
    if args.profile and device.type == "cuda":
        result.update(profile_kernels(step, device))
    return per_step, result


IMAGE_BYTES = 3 * 32 * 32  # bench_gpu.cpp's image files: 3x32x32 uint8, then a label byte


def write_image_files(root, n):
    try:
        with open(os.path.join(root, "done")) as f:
            if int(f.read()) >= n:
                return
    except (OSError, ValueError):
        pass
    os.makedirs(root, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        image = torch.randint(0, 256, (IMAGE_BYTES,), generator=g, dtype=torch.uint8)
        with open(os.path.join(root, f"{i}.bin"), "wb") as f:
            f.write(image.numpy().tobytes() + bytes([i % 10]))
    with open(os.path.join(root, "done"), "w") as f:
        f.write(f"{n}\n")


class ImageFiles(torch.utils.data.Dataset):
    """Each sample read from its file and augmented as torchvision's
    RandomCrop(32, padding=4), RandomHorizontalFlip and Normalize do, in
    tensor ops (bench_gpu.cpp's transforms, there per batch)."""
    MEAN = torch.tensor([0.49, 0.48, 0.45]).view(3, 1, 1)
    STD = torch.tensor([0.25, 0.24, 0.26]).view(3, 1, 1)

    def __init__(self, root, n):
        self.root, self.n = root, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with open(os.path.join(self.root, f"{i}.bin"), "rb") as f:
            data = f.read()
        x = torch.frombuffer(bytearray(data[:IMAGE_BYTES]), dtype=torch.uint8).view(3, 32, 32)
        x = F.pad(x, (4, 4, 4, 4))
        top, left = torch.randint(0, 9, (2,)).tolist()
        x = x[:, top:top + 32, left:left + 32]
        if torch.rand(()) < 0.5:
            x = x.flip(-1)
        return (x.float().div_(255) - self.MEAN) / self.STD, data[IMAGE_BYTES]


def loader(workers, pinned, args):
    """ResNet-10 (eager, bf16 autocast, fused AdamW, channels-last) at batch
    256 fed by DataLoader; workers -1: batches already in device memory."""
    device = torch.device(args.device)
    batch = max(2, int(256 * args.batch_scale))
    n = batch * (5 + args.steps)
    write_image_files(args.loader_dir, n)
    torch.manual_seed(0)
    model = ResNet10().to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-4, fused=True)
    if workers < 0:
        source = [(torch.randn(batch, 3, 32, 32, device=device), torch.randint(0, 10, (batch,),
                  device=device)) for _ in range(5 + args.steps)]
    else:
        source = torch.utils.data.DataLoader(ImageFiles(args.loader_dir, n), batch_size=batch,
                                             shuffle=True, num_workers=workers, drop_last=True,
                                             pin_memory=pinned and device.type == "cuda")
    t0 = None
    for i, (x, y) in enumerate(source):
        if i == 5:
            sync(device)
            t0 = time.perf_counter()
        x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        y = y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync(device)
    per_step = (time.perf_counter() - t0) / args.steps
    return {"bench": "pytorch_loader", "case": "loader", "precision": "bf16", "way": "DataLoader",
            "workers": workers, "pin_memory": pinned, "torch": torch.__version__, "batch": batch,
            "ms_per_step": round(per_step * 1e3, 4), "samples_per_s": round(batch / per_step, 1)}


def lightning(way, name, precision, build, shape, channels_last, args):
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = build()

        def training_step(self, batch, _):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=5e-4, fused=True)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2,
                                                        total_steps=args.steps + 20,
                                                        cycle_momentum=False)
            return [opt], [{"scheduler": sched, "interval": "step"}]

    class Timer(pl.Callback):
        def __init__(self):
            self.t0 = self.t1 = None

        def on_train_batch_end(self, trainer, *_):
            if trainer.global_step in (5, 5 + args.steps):
                sync(torch.device(args.device))
                if trainer.global_step == 5:
                    self.t0 = time.perf_counter()
                else:
                    self.t1 = time.perf_counter()

    torch.manual_seed(0)
    xs = torch.randn((4 * shape[0],) + tuple(shape[1:]))
    ys = torch.randint(0, 10, (4 * shape[0],))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys),
                                         batch_size=shape[0], pin_memory=True, num_workers=2,
                                         persistent_workers=True)
    module = Module()
    timer = Timer()
    prec = {"fp16": "16-mixed", "bf16": "bf16-mixed"}.get(precision, "32-true")
    trainer = pl.Trainer(accelerator="gpu" if args.device == "cuda" else "cpu", devices=1,
                         precision=prec, max_steps=5 + args.steps, benchmark=True, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[timer])
    trainer.fit(module, loader)
    return (timer.t1 - timer.t0) / args.steps, {}, module.net, xs[:1].to(args.device)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cases", default="resnet10,mlp,transformer,gpt,loader")
    ap.add_argument("--ways", default="eager,fused,compile,reduce-overhead,max-autotune,lightning")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch-scale", type=float, default=1.0)
    ap.add_argument("--peak-flops", type=float, default=0.0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--loader-dir", default="build/gpu/loader-data")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    ways = {"eager": "eager", "fused": "fused", "compile": "compile",
            "reduce-overhead": "reduce-overhead", "max-autotune": "max-autotune-no-cudagraphs",
            "lightning": "lightning"}
    for name, precision, build, shape, channels_last in cases(args):
        for key in args.ways.split(","):
            way = ways[key]
            line = {"bench": "pytorch_" + name, "case": name, "precision": precision, "way": way,
                    "torch": torch.__version__, "batch": shape[0]}
            try:
                run = lightning if way == "lightning" else plain
                per_step, extra, model, example = run(way, name, precision, build, shape,
                                                      channels_last, args)
            except Exception as e:  # a way this machine lacks (Lightning) or that fails
                line["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                print(json.dumps(line), flush=True)
                continue
            line.update(ms_per_step=round(per_step * 1e3, 4),
                        samples_per_s=round(shape[0] / per_step, 1),
                        steps_per_s=round(1 / per_step, 1), **extra)
            if args.peak_flops > 0:
                flops = train_flops_per_sample(model, example)
                line["mfu"] = round(flops * shape[0] / per_step / args.peak_flops, 4)
            print(json.dumps(line), flush=True)
    for name in GPTS if "gpt" in args.cases.split(",") else ():
        for key in args.ways.split(","):
            way = ways[key]
            if way == "lightning":
                continue
            line = {"bench": "pytorch_" + name, "case": name, "precision": "bf16", "way": way,
                    "torch": torch.__version__}
            try:
                line.update(gpt(way, name, args))
            except Exception as e:
                line["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(json.dumps(line), flush=True)
    if "loader" in args.cases:
        for workers, pinned in [(-1, False)] + [(w, p) for w in (0, 2, 4, 8) for p in (True, False)]:
            print(json.dumps(loader(workers, pinned, args)), flush=True)


if __name__ == "__main__":
    main()
