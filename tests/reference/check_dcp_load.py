"""PyTorch's dcp.load reads trainkit's sharded checkpoints (CTest sharding.dcp_python).

  python3 check_dcp_load.py RESHARD_DIR
RESHARD_DIR holds what tests/ddp/sharding_worker.cpp's reshard_save wrote:
<strategy>-<ranks>.ckpt, a sharded folder under the sharding strategies, and
<strategy>-<ranks>.pt, its parameters gathered whole (torch.save format).
For the folders 2 and 3 ranks wrote, one process with no process group
fills the same model from the folder with dcp.load, and every tensor must
equal the .pt's bit for bit; dcp_to_torch_save nests the model and the
optimizer state as a Python user saved them. Exit 77 (skipped) where this
PyTorch has no torch.distributed.checkpoint (Debian 12's 1.13).
"""
import glob
import os
import sys
import tempfile
import warnings

import torch
from torch import nn

try:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
except ImportError as e:
    print(f"trainkit-skip: torch {torch.__version__} has no torch.distributed.checkpoint ({e})")
    sys.exit(77)


class Tiny(nn.Module):
    """sharding_worker.cpp's Tiny."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 7)
        self.fc2 = nn.Linear(7, 1)


def main(folder):
    warnings.simplefilter("ignore")  # "assuming the intent is to load in a single process"
    checked = []
    for ckpt in sorted(glob.glob(os.path.join(folder, "*-[23].ckpt"))):
        if not os.path.exists(os.path.join(ckpt, ".metadata")):
            continue  # the one-file form (DDP, ZeroSharded)
        want = torch.load(ckpt[:-len(".ckpt")] + ".pt", weights_only=True)
        model = Tiny()
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float("nan"))
        state = model.state_dict()
        dcp.load({"model": state}, checkpoint_id=ckpt)
        model.load_state_dict(state)
        for name, t in model.state_dict().items():
            if t.dtype != want[name].dtype or not torch.equal(t, want[name]):
                sys.exit(f"{ckpt}: {name} is {t.tolist()}, trainkit saved {want[name].tolist()}")
        checked.append(os.path.basename(ckpt))
    if len(checked) != 6:
        sys.exit(f"read {checked}: expected the 3 sharding strategies' folders of 2 and 3 ranks")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(folder, "FullShard-3.ckpt")
        out = os.path.join(tmp, "whole.pt")
        dcp_to_torch_save(ckpt, out)
        whole = torch.load(out, weights_only=True)
        want = torch.load(os.path.join(folder, "FullShard-3.pt"), weights_only=True)
        for name, t in want.items():
            if not torch.equal(whole["model"][name], t):
                sys.exit(f"dcp_to_torch_save: model.{name} differs")
        moments = whole["optim"]["state"]["fc1.weight"]
        if moments["exp_avg"].shape != (7, 5) or moments["exp_avg_sq"].shape != (7, 5):
            sys.exit(f"dcp_to_torch_save: optim.state.fc1.weight is {moments}")
    print(f"torch {torch.__version__}: dcp.load read {', '.join(checked)} bit for bit; "
          "dcp_to_torch_save nests model and optim")


if __name__ == "__main__":
    main(*sys.argv[1:])
