#!/usr/bin/env bash
# Runs a C++ program on 2 ranks under PyTorch's own launcher, as a user would:
#   tests/torchrun_test.sh [--fresh DIR] [torchrun flags] -- PROGRAM ARGS...
# The flags are spelled as both Debian 12's torchrun (1.13) and Debian 13's
# (2.6) accept them; --redirects 1 --tee 1 because 1.13 under Python 3.11
# otherwise fails in its own error handler. Without --standalone or
# --rdzv_endpoint the rendezvous is torchrun's agent store, on a free port;
# a later --nproc_per_node replaces the 2. --fresh empties DIR
# first (a checkpoint folder that must start empty). Skipped (77) where
# no python3 has torch.
set -euo pipefail
py=
for candidate in python3 /usr/bin/python3; do  # a PATH python3 may lack Debian's torch
  if "$candidate" -c 'import torch.distributed.run' 2>/dev/null; then py=$candidate && break; fi
done
if [ -z "$py" ]; then
  echo "trainkit-skip: no python3 with torch (PyTorch's launcher)"
  exit 77
fi
flags=()
while [ "$1" != "--" ]; do
  if [ "$1" = --fresh ]; then rm -rf "$2" && mkdir -p "$2" && shift 2; continue; fi
  flags+=("$1")
  shift
done
shift
if [[ " ${flags[*]} " != *" --standalone "* && " ${flags[*]} " != *" --rdzv_endpoint "* ]]; then
  port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  flags+=(--master_port "$port")
fi
# Debian 13's PyTorch 2.6 is built without libuv, yet its launcher's stores
# ask for it (TCPStore's use_libuv defaults to true): torchrun as Debian
# ships it starts nothing ("use_libuv was requested but PyTorch was build
# without libuv support"). There it runs with use_libuv=False as the stores'
# default; the agent, rendezvous and restarts are torchrun's own.
launcher=(-m torch.distributed.run)
if ! "$py" -c 'from torch.distributed import TCPStore; TCPStore("127.0.0.1", 0, 1, True)' 2>/dev/null; then
  echo "torchrun_test: this PyTorch has no libuv: its stores default to use_libuv=False"
  export USE_LIBUV=0
  launcher=(-c '
import runpy, sys
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend, static_tcp_rendezvous

class TCPStore(dist.TCPStore):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("use_libuv", False)
        super().__init__(*args, **kwargs)

dist.TCPStore = c10d_rendezvous_backend.TCPStore = static_tcp_rendezvous.TCPStore = TCPStore
sys.argv[0] = "torchrun"
runpy.run_module("torch.distributed.run", run_name="__main__")')
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
OMP_NUM_THREADS=1 "$py" "${launcher[@]}" --nproc_per_node 2 --no_python --redirects 1 --tee 1 \
  --log_dir "$logs" "${flags[@]}" "$@"
