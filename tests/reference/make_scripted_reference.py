#!/usr/bin/env python3
"""Reference for tests/script_module_test.cpp: two models defined here in
Python, scripted (torch.jit.script) and traced (torch.jit.trace) into
TorchScript archives that the C++ test loads and trains with trainkit, and
trained here by PyTorch's own loop from the same weights.

- SmallCnn: convolutions with batch norm (buffers, train and eval mode),
  forward(images) -> logits. SGD (momentum 0.9, nesterov, weight decay
  5e-4) with the batch norms' parameters in a group of their own at half the
  rate, selected by their state_dict names; StepLR(5, 0.5); 20 steps.
- SmallTransformer: forward(tokens, targets) -> (logits, loss), two inputs
  and two outputs; a non-persistent causal-mask buffer. AdamW (0.9, 0.95)
  with weight decay 0.1 on tensors of 2 or more dimensions only; linear
  warm-up then cosine decay; two micro-batches per step; clip_grad_norm_(1.0);
  20 steps.
- SmallCnn again under CPU autocast to bfloat16 (the loss from the logits
  in fp32), 5 steps: the losses only.

Initial weights, batches and the archives' weights are closed formulas (so
the archives PyTorch 1.13 and 2.6 write hold the same numbers). Writes the
archives to scripted/ (cnn_script, cnn_trace, transformer_script,
transformer_trace, each suffixed with the PyTorch that wrote it) and
scripted_torch<version>.json: per model the loss of each step, samples of
every final parameter and buffer, and the eval-mode output on one batch.
Run in each PyTorch, where scripts/check_onednn.py passes (Debian 13's
oneDNN miscomputes convolution gradients on some AVX-512 CPUs: there, with
ONEDNN_MAX_CPU_ISA=AVX2 as the test command sets it; docs/testing.md):
  /usr/bin/python3 tests/reference/make_scripted_reference.py
  bash scripts/debian13.sh run /usr/bin/python3 /src/tests/reference/make_scripted_reference.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, SAMPLES = 20, 12
IMAGES, CLASSES, SIDE = 8, 5, 8
VOCAB, BLOCK, EMBD, HEADS, LAYERS, SEQUENCES = 16, 8, 16, 2, 2, 4
TRANSFORMER_ACCUMULATE = 2
BF16_STEPS = 5


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, CLASSES)

    def forward(self, images):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(images))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean((2, 3)))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(EMBD, 3 * EMBD)
        self.proj = nn.Linear(EMBD, EMBD)
        self.heads = HEADS
        self.register_buffer("causal", torch.ones(BLOCK, BLOCK).tril().bool(), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        D = C // H
        q, k, v = self.qkv(x).split(C, 2)
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(self.causal[:T, :T].logical_not(), float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBD)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(EMBD)
        self.fc = nn.Linear(EMBD, 2 * EMBD)
        self.out = nn.Linear(2 * EMBD, EMBD)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.out(F.gelu(self.fc(self.ln_2(x))))


class SmallTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, EMBD)
        self.position = nn.Parameter(torch.zeros(BLOCK, EMBD))
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(EMBD)
        self.head = nn.Linear(EMBD, VOCAB, bias=False)

    def forward(self, tokens, targets):
        x = self.tokens(tokens) + self.position[: tokens.size(1)]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def init(model):
    """Parameter k (named_parameters order) of n values: 0.05 sin(0.37 i +
    0.11 (k + 1)), plus 1 for the weights of norms (names with "bn" or "ln")."""
    with torch.no_grad():
        for k, (name, p) in enumerate(model.named_parameters()):
            v = torch.sin(torch.arange(p.numel(), dtype=torch.float64) * 0.37 + 0.11 * (k + 1)) * 0.05
            if ("bn" in name or "ln" in name) and name.endswith(".weight"):
                v = v + 1.0
            p.copy_(v.to(torch.float32).view_as(p))


def cnn_batch(m):
    """Labels (3 b + m) mod 5; images ((37 i + 11 m) mod 23 - 11) / 8 over
    their flat index i, plus (label - 2) / 2 on image b's upper half."""
    i = torch.arange(IMAGES * SIDE * SIDE)
    images = ((((37 * i + 11 * m) % 23) - 11).to(torch.float32) / 8.0).view(IMAGES, 1, SIDE, SIDE)
    labels = (3 * torch.arange(IMAGES) + m) % CLASSES
    images[:, :, : SIDE // 2] += ((labels.to(torch.float32) - 2) / 2).view(IMAGES, 1, 1, 1)
    return images, labels


def transformer_batch(m):
    """Sequence b: start (5 m + 3 b) mod V, stride 1 + (m + 2 b) mod 3, mod V."""
    rows = []
    for b in range(SEQUENCES):
        start, stride = (5 * m + 3 * b) % VOCAB, 1 + (m + 2 * b) % 3
        rows.append([(start + stride * t) % VOCAB for t in range(BLOCK + 1)])
    seq = torch.tensor(rows, dtype=torch.long)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def non_persistent(model):
    """The non-persistent buffers' state_dict names (TorchScript forgets the flag)."""
    return [f"{prefix}.{name}" if prefix else name for prefix, m in model.named_modules()
            for name in m._non_persistent_buffers_set]


def version():
    return ".".join(torch.__version__.split(".")[:2])


def write_archives():
    for name, make, example in (("cnn", SmallCnn, cnn_batch(0)[:1]),
                                ("transformer", SmallTransformer, transformer_batch(0))):
        model = make()
        init(model)
        extra = {"trainkit/non_persistent_buffers": "\n".join(non_persistent(model))}
        scripted = torch.jit.script(model)
        torch.jit.save(scripted, os.path.join(HERE, "scripted", f"{name}_script_torch{version()}.pt"),
                       _extra_files=extra)
        # Traced in training mode (what it records), from a copy: tracing
        # runs forward, which moves batch norm's running statistics.
        copy = make()
        init(copy)
        traced = torch.jit.trace(copy, example, check_trace=False)
        every = dict(model.named_parameters(), **dict(model.named_buffers()))
        with torch.no_grad():
            for key, tensor in traced.state_dict().items():
                tensor.copy_(every[key])
        torch.jit.save(traced, os.path.join(HERE, "scripted", f"{name}_trace_torch{version()}.pt"),
                       _extra_files=extra)


def samples(tensor, name=""):
    flat = tensor.detach().reshape(-1).to(torch.float64)
    indices = range(0, flat.numel(), max(1, flat.numel() // SAMPLES))
    if name.endswith("attn.qkv.bias"):
        # The keys' bias adds the same q.b to a query's every score, which
        # softmax cancels: its gradient is rounding noise, whose sign Adam
        # turns into +-lr steps. Only the queries' and values' parts.
        indices = [i for i in indices if not EMBD <= i < 2 * EMBD]
    indices = list(indices)[:SAMPLES]
    return {"indices": indices, "values": flat[indices].tolist()}


def train_cnn(autocast=False, steps=STEPS):
    model = SmallCnn()
    init(model)
    named = list(model.named_parameters())
    norms = [p for n, p in named if n.startswith("bn")]
    rest = [p for n, p in named if not n.startswith("bn")]
    opt = torch.optim.SGD([{"params": rest}, {"params": norms, "lr": 0.05}], lr=0.1,
                          momentum=0.9, nesterov=True, weight_decay=5e-4, foreach=False)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    losses = []
    for step in range(steps):
        images, labels = cnn_batch(step % 4)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        out = model(cnn_batch(7)[0])
    return model, losses, out


def train_transformer():
    model = SmallTransformer()
    init(model)
    named = list(model.named_parameters())
    opt = torch.optim.AdamW([{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), foreach=False)
    L = torch.optim.lr_scheduler
    sched = L.SequentialLR(opt, [L.LinearLR(opt, start_factor=0.1, total_iters=5),
                                 L.CosineAnnealingLR(opt, T_max=STEPS - 5, eta_min=3e-4)],
                           milestones=[5])
    losses = []
    for step in range(STEPS):
        window = []
        for micro in range(TRANSFORMER_ACCUMULATE):
            tokens, targets = transformer_batch(TRANSFORMER_ACCUMULATE * step + micro)
            _, loss = model(tokens, targets)
            (loss / TRANSFORMER_ACCUMULATE).backward()
            window.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        losses.append(sum(window) / len(window))
    model.eval()
    with torch.no_grad():
        out, _ = model(*transformer_batch(99))
    return model, losses, out


def main():
    torch.set_num_threads(1)
    write_archives()
    out = {"torch": torch.__version__}
    for name, train in (("cnn", train_cnn), ("transformer", train_transformer)):
        model, losses, eval_out = train()
        assert losses[-1] < 0.9 * losses[0], f"{name} should learn: {losses}"
        out[name] = {"losses": losses,
                     "state": [dict(name=k, **samples(v, k)) for k, v in model.state_dict().items()],
                     "eval_output": samples(eval_out)}
        print(f"{name}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    _, losses, _ = train_cnn(autocast=True, steps=BF16_STEPS)
    out["cnn_bf16_losses"] = losses
    with open(os.path.join(HERE, f"scripted_torch{version()}.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
