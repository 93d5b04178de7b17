#!/usr/bin/env python3
"""Reads back what tests/script_module_test.cpp wrote for Python: for the
scripted cnn and transformer of make_scripted_reference.py, trained by
trainkit, the TorchScript archive (torch.jit.load) and the state dict
(torch.load, into the original Python class with strict=True). Both, in
eval mode on the C++ test's batch, give the outputs trainkit computed
(expected.json). Usage: check_scripted_roundtrip.py DIR"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_scripted_reference as ref  # noqa: E402


def main():
    folder = sys.argv[1]
    with open(os.path.join(folder, "expected.json")) as f:
        expected = json.load(f)
    failures = []
    for name, make, batch in (("cnn", ref.SmallCnn, lambda: (ref.cnn_batch(7)[0],)),
                              ("transformer", ref.SmallTransformer, lambda: ref.transformer_batch(99))):
        archive = torch.jit.load(os.path.join(folder, f"{name}.pt"))
        model = make()
        model.load_state_dict(torch.load(os.path.join(folder, f"{name}_state.pt")), strict=True)
        want = torch.tensor(expected[name], dtype=torch.float64)
        for what, m in (("archive", archive), ("state dict", model)):
            m.eval()
            with torch.no_grad():
                out = m(*batch())
            out = (out[0] if isinstance(out, tuple) else out).reshape(-1).to(torch.float64)
            error = ((out - want).abs() / want.abs().clamp_min(1e-3)).max().item()
            print(f"{name} {what}: relative error {error:.3g}")
            if error > 1e-6:
                failures.append(f"{name} {what}")
    if failures:
        print("differ from trainkit's outputs:", ", ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
