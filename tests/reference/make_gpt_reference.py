#!/usr/bin/env python3
"""Reference for tests/gpt_test.cpp: examples/gpt.hpp's GPT trained by
PyTorch's own loop, the way nanoGPT's train.py trains:

- AdamW(betas 0.9/0.95) with nanoGPT's two groups: weight decay 0.1 on the
  tensors of 2 or more dimensions, none on biases and LayerNorms;
- linear warm-up then cosine decay: SequentialLR(LinearLR, CosineAnnealingLR);
- two micro-batches per step (each loss divided by 2), clip_grad_norm_(1.0);
- batches of right-padded sequences: tokens padded with 0, targets with -100
  (cross_entropy's ignore_index), and the padding mask in the forward.

20 optimizer steps (40 micro-batches) in fp32 on the CPU. The initial
weights and the batches are closed formulas (`init` and `micro_batch`
below), which the C++ test evaluates the same way, so no weights are
stored. Writes gpt.json beside this file: the parameter names in order, per
step the mean loss of its micro-batches (what trainkit's TrainState::loss()
reports) and the gradient norm before clipping,
and samples of every final parameter (their indices and values). Run it in the Debian 13 root:
  bash scripts/debian13.sh run /usr/bin/python3 /src/tests/reference/make_gpt_reference.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, BLOCK, LAYERS, HEADS, EMBD = 24, 16, 2, 4, 32
BATCH, STEPS, ACCUMULATE = 4, 20, 2
LR, MIN_LR, WARMUP, START_FACTOR = 3e-3, 3e-4, 5, 0.1
WEIGHT_DECAY, BETAS, MAX_NORM = 0.1, (0.9, 0.95), 1.0
SAMPLES = 16  # values kept per final parameter


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(EMBD, 3 * EMBD)
        self.c_proj = nn.Linear(EMBD, EMBD)

    def forward(self, x, allowed):
        B, T, C = x.shape
        D = C // HEADS
        q, k, v = self.c_attn(x).split(C, 2)
        q, k, v = (t.view(B, T, HEADS, D).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = torch.softmax(att.masked_fill(allowed.logical_not(), float("-inf")), -1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(EMBD, 4 * EMBD)
        self.c_proj = nn.Linear(4 * EMBD, EMBD)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(EMBD)
        self.mlp = Mlp()

    def forward(self, x, allowed):
        x = x + self.attn(self.ln_1(x), allowed)
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.wpe = nn.Embedding(BLOCK, EMBD)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(EMBD)

    def forward(self, tokens, mask):
        T = tokens.size(1)
        x = self.wte(tokens) + self.wpe(torch.arange(T))
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        allowed = causal.view(1, 1, T, T).logical_and(mask.view(-1, 1, 1, T))
        for block in self.h:
            x = block(x, allowed)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head


def init(model):
    """Parameter k (in named_parameters order) of n values: 0.02 sin(0.37 i +
    0.11 (k + 1)), plus 1 for the LayerNorms' weights."""
    with torch.no_grad():
        for k, (name, p) in enumerate(model.named_parameters()):
            v = torch.sin(torch.arange(p.numel(), dtype=torch.float64) * 0.37 + 0.11 * (k + 1)) * 0.02
            if "ln_" in name and name.endswith(".weight"):
                v = v + 1.0
            p.copy_(v.to(torch.float32).view_as(p))


def micro_batch(m):
    """Micro-batch m: sequence b has L = 16 - 3 ((m + b) mod 4) real tokens, an
    arithmetic progression mod VOCAB; tokens padded with 0, targets with -100."""
    tokens = torch.zeros(BATCH, BLOCK, dtype=torch.long)
    targets = torch.full((BATCH, BLOCK), -100, dtype=torch.long)
    mask = torch.zeros(BATCH, BLOCK, dtype=torch.bool)
    for b in range(BATCH):
        length = BLOCK - 3 * ((m + b) % 4)
        start, stride = (5 * m + 3 * b) % VOCAB, 1 + (m + 2 * b) % 3
        seq = [(start + stride * t) % VOCAB for t in range(length + 1)]
        tokens[b, :length] = torch.tensor(seq[:-1])
        targets[b, :length] = torch.tensor(seq[1:])
        mask[b, :length] = True
    return tokens, mask, targets


def main():
    torch.set_num_threads(1)
    model = Gpt()
    init(model)
    named = list(model.named_parameters())
    decay = [p for _, p in named if p.dim() >= 2]
    no_decay = [p for _, p in named if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, foreach=False)
    L = torch.optim.lr_scheduler
    sched = L.SequentialLR(opt, [L.LinearLR(opt, start_factor=START_FACTOR, total_iters=WARMUP),
                                 L.CosineAnnealingLR(opt, T_max=STEPS - WARMUP, eta_min=MIN_LR)],
                           milestones=[WARMUP])
    steps = []
    for step in range(STEPS):
        window = []
        for micro in range(ACCUMULATE):
            tokens, mask, targets = micro_batch(ACCUMULATE * step + micro)
            logits = model(tokens, mask)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
            (loss / ACCUMULATE).backward()
            window.append(loss.item())
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        steps.append({"loss": sum(window) / len(window), "grad_norm": norm.item()})
    clipped = sum(s["grad_norm"] > MAX_NORM for s in steps)
    assert 0 < clipped < STEPS, f"clipping should act on some steps, not all: {clipped}"
    params = []
    for name, p in named:
        flat = p.detach().reshape(-1)
        indices = range(0, flat.numel(), max(1, flat.numel() // SAMPLES))
        if name.endswith("attn.c_attn.bias"):
            # The keys' bias adds the same q.b to a query's every score, which
            # softmax cancels: its gradient is rounding noise, whose sign
            # Adam turns into +-lr steps. Only the queries' and values' parts.
            indices = [i for i in indices if not EMBD <= i < 2 * EMBD]
        indices = list(indices)[:SAMPLES]
        params.append({"name": name, "indices": indices, "values": flat[indices].tolist()})
    out = {"torch": torch.__version__, "steps": steps, "params": params}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}: loss {steps[0]['loss']:.4f} -> {steps[-1]['loss']:.4f}, "
          f"{clipped} of {STEPS} steps clipped")


if __name__ == "__main__":
    main()
