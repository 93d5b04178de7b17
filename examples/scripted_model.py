#!/usr/bin/env python3
"""The model of examples/scripted.cpp, defined in Python: a small CNN with
batch norm and dropout for the 28x28 glyphs (10 classes).

  python3 examples/scripted_model.py script model.pt    # torch.jit.script, saved for C++
  python3 examples/scripted_model.py check DIR          # what the C++ run wrote back

`check` loads the trained archive (torch.jit.load) and the trained state
dict into GlyphNet with strict=True, and checks that both give the same
outputs in eval mode: the model is back in Python, whole.
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn


class GlyphNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(32, 10)

    def forward(self, images):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(images))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.head(self.dropout(x.mean((2, 3))))


def non_persistent(model):
    """Buffers registered with persistent=False, which TorchScript forgets:
    trainkit leaves them out of the state dict it writes back."""
    return [f"{prefix}.{name}" if prefix else name for prefix, m in model.named_modules()
            for name in m._non_persistent_buffers_set]


def script(path):
    torch.manual_seed(0)
    model = GlyphNet()
    # torch.jit.script keeps train() and eval() working (a traced model keeps
    # the mode it was traced in: its dropout and batch norm would too).
    torch.jit.save(torch.jit.script(model), path,
                   _extra_files={"trainkit/non_persistent_buffers": "\n".join(non_persistent(model))})
    print(f"scripted GlyphNet into {path}")


def check(folder):
    archive = torch.jit.load(os.path.join(folder, "trained.pt"))
    model = GlyphNet()
    model.load_state_dict(torch.load(os.path.join(folder, "trained_state.pt")), strict=True)
    archive.eval()
    model.eval()
    images = torch.randn(16, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        difference = (archive(images) - model(images)).abs().max().item()
    ok = difference <= 1e-6
    print(f"back in Python: the archive and GlyphNet with the state dict differ by {difference:.3g}"
          f" ({'ok' if ok else 'FAILED'})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("script", "check"):
        sys.exit(__doc__)
    (script if sys.argv[1] == "script" else check)(sys.argv[2])
