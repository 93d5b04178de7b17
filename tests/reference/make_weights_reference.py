"""Writes the PyTorch files the weights tests load (tests/weights_test.cpp).

Run with each PyTorch the test command meets, from the repo root:
  /usr/bin/python3 tests/reference/make_weights_reference.py               # Debian 12: 1.13
  bash scripts/debian13.sh run /usr/bin/python3 /src/tests/reference/make_weights_reference.py
Each run writes weights/*_torch<major><minor>.pt with torch.save, and the same
version-free files: weights.json (what every file must read as) and
weights/pretrained.safetensors, written here by the format's specification
(Debian packages no python3-safetensors).

It also writes the version-free hostile files (weights/hostile_*.pt): small
torch.save files whose pickle shares containers through its memo, so that a
walk of every path would name millions of tensors (weights_test.cpp's
"hostile" case and the torch_save fuzz target's seeds).

Every value is a multiple of 1/64 below 1, exact in every dtype used, so the
files of both versions hold the same numbers and a reader must give them
bit for bit.
"""
import collections
import json
import os
import struct
import zipfile

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "weights")
VERSION = "".join(torch.__version__.split(".")[:2])


class Net(nn.Module):
    """The model of tests/weights_test.cpp: a backbone and a head of `classes`."""

    def __init__(self, classes):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(),
                                      nn.Linear(16, 16))
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(torch.relu(self.backbone(x)))


def pretrained_state():
    net = Net(10)
    with torch.no_grad():
        for k, (name, t) in enumerate(net.state_dict().items()):
            if t.dtype == torch.int64:  # num_batches_tracked
                t.fill_(123)
            elif name.endswith("running_var"):
                t.copy_(1 + torch.arange(t.numel()).reshape(t.shape) % 13 / 16)
            else:
                i = torch.arange(t.numel()).reshape(t.shape)
                t.copy_(((i * 37 + k * 11) % 101 - 50) / 64)
    return net.state_dict()


def views():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 8
    return {
        "base": base,
        "transposed": base.t(),  # views of base's storage: one record
        "slice": base[1:, 2:],
        "float16": (torch.arange(6) / 4 - 0.5).half().reshape(2, 3),
        "bfloat16": (torch.arange(4) / 8).bfloat16(),
        "float64": torch.arange(3, dtype=torch.float64) / 3,
        "int64": torch.tensor([-3, 2 ** 40]),
        "int32": torch.arange(5, dtype=torch.int32) - 2,
        "int8": torch.tensor([-128, 127], dtype=torch.int8),
        "uint8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "parameter": nn.Parameter(torch.ones(2) / 2),
    }


def wrapped(state):
    """A training script's checkpoint: the state dict beside other things."""
    net = Net(10)
    net.load_state_dict(state)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(2, 4)).sum().backward()
    opt.step()
    return {"epoch": 3, "model": state, "optimizer": opt.state_dict(), "note": "pretrained",
            "history": [0.5, 0.25]}


def described(tensors):
    out = {}
    for name, t in tensors.items():
        t = t.detach()
        out[name] = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                     "values": t.reshape(-1).to(torch.float64 if t.is_floating_point()
                                                 else torch.int64).tolist()}
    return out


def write_safetensors(path, tensors):
    names = {torch.float32: "F32", torch.int64: "I64"}
    header, data = {}, b""
    for name, t in tensors.items():
        raw = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def write_refused():
    """Files a reader must refuse with a clear Error, one for each case."""
    def at(name):
        return os.path.join(OUT, f"refused_{name}_torch{VERSION}.pt")
    torch.save({"w": torch.ones(2)}, at("legacy"), _use_new_zipfile_serialization=False)
    torch.save({"w": torch.ones(2), "counts": collections.Counter("ab")}, at("global"))
    torch.jit.save(torch.jit.script(nn.Linear(2, 2)), at("torchscript"))
    plain = at("plain")
    torch.save({"w": torch.ones(2)}, plain)
    with zipfile.ZipFile(plain) as src, \
            zipfile.ZipFile(at("compressed"), "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item.filename, src.read(item.filename))
    os.remove(plain)


def shared_config(state):
    """A legitimate file that shares containers without tensors: one dict of
    settings under two keys, one betas tuple in two parameter groups."""
    settings = {"betas": (0.9, 0.95), "eps": 1e-8}
    groups = [{"params": [0, 1], **settings}, {"params": [2], **settings}]
    return {"model": state, "settings": settings, "again": settings, "groups": groups}


def write_hostile():
    """torch.save files of a few hundred bytes to a few hundred kB whose
    pickle reaches one dict of tensors by very many paths."""
    def at(name):
        return os.path.join(OUT, f"hostile_{name}.pt")
    # 2^24 paths to one tensor: each level a dict whose two values are the
    # same dict (memoized: a few bytes a level).
    level = {"w": torch.ones(1)}
    for _ in range(24):
        level = {"a": level, "b": level}
    torch.save(level, at("shared"))
    # The same with 1 kB keys: every path's name is 24 kB long.
    level = {"w": torch.ones(1)}
    for i in range(24):
        level = {"k" * 1000 + "a": level, "k" * 1000 + "b": level}
    torch.save(level, at("long_keys"))
    # No container shared, but one long key (memoized) 30 levels down to a
    # dict of 8000 entries that are one tensor: 8000 names of 30 kB each.
    key = "k" * 1000
    one = torch.ones(1)
    level = {str(i): one for i in range(8000)}
    for _ in range(30):
        level = {key: level}
    torch.save(level, at("long_names"))


def main():
    os.makedirs(OUT, exist_ok=True)
    state = pretrained_state()
    torch.save(state, os.path.join(OUT, f"pretrained_torch{VERSION}.pt"))
    torch.save(views(), os.path.join(OUT, f"views_torch{VERSION}.pt"))
    w = wrapped(state)
    torch.save(w, os.path.join(OUT, f"wrapped_torch{VERSION}.pt"))
    write_safetensors(os.path.join(OUT, "pretrained.safetensors"), state)
    write_refused()
    write_hostile()
    torch.save(views(), os.path.join(OUT, f"protocol1_torch{VERSION}.pt"), pickle_protocol=1)
    torch.save(shared_config(state), os.path.join(OUT, f"shared_torch{VERSION}.pt"))
    reference = {
        "pretrained": described(state),
        "views": described(views()),
        # the tensors' names as read (nested containers joined by dots)
        "wrapped_names": ["model." + n for n in state] +
                         [f"optimizer.state.{i}.momentum_buffer"
                          for i in w["optimizer"]["state"]],
    }
    with open(os.path.join(HERE, "weights.json"), "w") as f:
        json.dump(reference, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
