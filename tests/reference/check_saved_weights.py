"""Reads weights trainkit saved, as a Python user would (tests/weights_test.cpp).

  python3 check_saved_weights.py WEIGHTS.pt EXPECTED.json
EXPECTED.json maps each tensor's name to {dtype, shape, values}. The file must
load with torch.load (weights_only where this PyTorch has it), hold exactly
those tensors, and load strictly into make_weights_reference.Net(3).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_weights_reference import Net  # noqa: E402


def main(path, expected_path):
    try:
        state = torch.load(path, weights_only=True)
    except TypeError:  # PyTorch before 1.13 has no weights_only
        state = torch.load(path)
    with open(expected_path) as f:
        expected = json.load(f)
    if sorted(state) != sorted(expected):
        sys.exit(f"names differ: {sorted(state)} vs {sorted(expected)}")
    for name, want in expected.items():
        t = state[name]
        got = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
               "values": t.reshape(-1).to(torch.float64 if t.is_floating_point()
                                          else torch.int64).tolist()}
        if got != want:
            sys.exit(f"{name}: read {got}, expected {want}")
    Net(3).load_state_dict(state, strict=True)
    print(f"torch {torch.__version__} read {len(state)} tensors of {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
