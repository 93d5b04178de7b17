"""Exits 1 when this machine's PyTorch computes a convolution's input
gradient wrongly through oneDNN (mkldnn), 0 otherwise.

Debian 13's LibTorch 2.6 with its oneDNN 3.7.2 (libdnnl3.6 3.7.2+ds-2) gives
NaN or values off by tens for F.conv2d's input gradient on AVX-512 CPUs
(seen on an AMD EPYC with AVX-512, 2026-11-28; oneDNN's AVX2 kernels and
PyTorch's own path are right). scripts/run.sh then runs the Debian 13
phases with ONEDNN_MAX_CPU_ISA=AVX2 and says so; docs/testing.md has the
figures.
"""
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)
w = torch.randn(8, 8, 3, 3)
x0 = torch.randn(4, 8, 12, 12)
g = torch.randn(4, 8, 12, 12)
exact = x0.double().requires_grad_(True)
F.conv2d(exact, w.double(), padding=1).backward(g.double())
x = x0.clone().requires_grad_(True)
F.conv2d(x, w, padding=1).backward(g)
error = float((x.grad.double() - exact.grad).abs().max())
print(f"oneDNN convolution input gradient vs float64: max abs error {error:.3g}")
sys.exit(0 if error < 1e-3 else 1)
