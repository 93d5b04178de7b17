#!/usr/bin/env bash
# examples/gpt.cpp on two hosts under torchrun, as users start a multi-node
# job: one agent per host, two ranks each, rendezvous at host 0 (c10d).
# Run by tests/hosts/hosts.sh:
#   torchrun_hosts_test.sh MODE GPT OUT     MODE: ddp or fsdp
# The same four ranks on one host must train to the same losses (the CSV
# log's 9 significant digits): the hosts change where the ranks run, not
# what they compute.
set -euo pipefail
mode=$1
gpt=$2
out=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
read -ra hosts <<< "$TK_HOSTS"
rm -rf "$out" && mkdir -p "$out"
args=(--"$mode" --layers 2 --embd 32 --sentences 512 --epochs 2 --batch-size 4 --lr 6e-3
      --precision fp32 --max-val-loss 10)

# torchrun_test.sh skips (77) where no python3 has torch: so does this test.
rc=0
bash "$TK_ON" on "${hosts[0]}" bash "$here/../torchrun_test.sh" --standalone --nproc_per_node 4 \
  -- "$gpt" "${args[@]}" --runs-dir "$out/one_host" > "$out/one_host.log" 2>&1 || rc=$?
if [ "$rc" = 77 ]; then cat "$out/one_host.log"; exit 77; fi
if [ "$rc" != 0 ]; then
  tail -n 20 "$out/one_host.log" >&2
  echo "torchrun_hosts_test: the one-host run failed" >&2
  exit 1
fi

pids=()
for host in "${hosts[@]}"; do
  bash "$TK_ON" on "$host" bash "$here/../torchrun_test.sh" --nnodes 2 --rdzv_backend c10d \
    --rdzv_endpoint "${hosts[0]}:29400" --rdzv_id "tk_$mode" \
    -- "$gpt" "${args[@]}" --runs-dir "$out/two_hosts" > "$out/$host.log" 2>&1 &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
if [ "$failed" != 0 ]; then
  tail -n 20 "$out"/tk*.log >&2
  echo "torchrun_hosts_test: the two-host run failed" >&2
  exit 1
fi
grep -h "gloo binds to" "$out"/tk*.log || true
grep -h "gpt: val_loss" "$out"/tk*.log

# epoch, step, lr, train_loss, val_loss: all but the wall-clock seconds
columns() { cut -d, -f1-3,5- "$1"; }
if ! diff <(columns "$out/one_host/log.csv") <(columns "$out/two_hosts/log.csv"); then
  echo "torchrun_hosts_test: two hosts trained otherwise than one ($mode)" >&2
  exit 1
fi
echo "torchrun_hosts_test: $mode on two hosts of two ranks equals one host of four:"
columns "$out/two_hosts/log.csv"

# The same with trainkit's own launcher, one per host (ranks by node: 0-1 on host 0).
[ "$mode" = ddp ] || exit 0
pids=()
for node in 0 1; do
  OMP_NUM_THREADS=1 bash "$TK_ON" on "${hosts[node]}" bash "$here/../../scripts/launch.sh" -n 2 \
    --nnodes 2 --node-rank "$node" --master-addr "${hosts[0]}" --port 29500 \
    -- "$gpt" "${args[@]}" --runs-dir "$out/launch_sh" > "$out/launch_sh$node.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
if [ "$failed" != 0 ]; then
  tail -n 20 "$out"/launch_sh*.log >&2
  echo "torchrun_hosts_test: the two-host run of scripts/launch.sh failed" >&2
  exit 1
fi
if ! diff <(columns "$out/one_host/log.csv") <(columns "$out/launch_sh/log.csv"); then
  echo "torchrun_hosts_test: scripts/launch.sh on two hosts trained otherwise than one" >&2
  exit 1
fi
echo "torchrun_hosts_test: and so did scripts/launch.sh on two hosts"
