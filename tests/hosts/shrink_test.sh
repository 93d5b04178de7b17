#!/usr/bin/env bash
# Going on with fewer hosts: torchrun on two hosts of two ranks each with
# `--nnodes 1:2 --max_restarts 1`, a fully sharded run (tests/hosts/fault_worker.cpp
# shrink); host 1 dies whole mid-epoch; host 0's agent restarts its two ranks
# alone, which resume from the newest checkpoint (saved by four ranks,
# resharded to two) and finish. Run by tests/hosts/hosts.sh:
#   shrink_test.sh WORKER OUT
# The final parameters must equal, to the byte, those of two ranks resuming
# from the same checkpoint on purpose, and the interrupted epoch must train
# each sample once: the four ranks' steps up to the checkpoint, then the
# two ranks' rest of it. (When host 1 joins late, host 0's two ranks start
# alone and torchrun restarts them as four when it comes: then three run
# segments share epoch 0, and each sample is still trained once.)
set -euo pipefail
worker=$1
out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
read -ra hosts <<< "$TK_HOSTS"
rm -rf "$out" && mkdir -p "$out"
fail() { echo "shrink_test: $*" >&2; tail -n 15 "$out"/*.log >&2; exit 1; }

pids=()
for node in 0 1; do
  rc=0
  bash "$TK_ON" on "${hosts[node]}" bash "$here/../torchrun_test.sh" --nnodes 1:2 \
    --max_restarts 1 --monitor_interval 1 --rdzv_backend c10d \
    --rdzv_endpoint "${hosts[0]}:29400" --rdzv_id shrink --rdzv_conf last_call_timeout=1 \
    -- "$worker" shrink "$out/ckpt" "$out/elastic" > "$out/host$node.log" 2>&1 &
  pids+=($!)
done
both_train() {  # rank 0 reached step 10 and host 1's ranks train too
  grep -q "rank 0: step 10$" "$out/host0.log" 2> /dev/null &&
    grep -q "rank 2: step" "$out/host1.log" 2> /dev/null
}
for _ in $(seq 600); do
  both_train && break
  if grep -q "trainkit-skip:" "$out/host0.log" 2> /dev/null; then cat "$out/host0.log"; exit 77; fi
  sleep 0.1
done
both_train || fail "rank 0 did not reach step 10, or host 1's ranks did not train, within 60 s"
bash "$TK_ON" down "${hosts[1]}"
wait "${pids[1]}" 2> /dev/null || true
wait "${pids[0]}" || fail "host 0's torchrun did not finish the run alone"

resumed=$(grep -ho "rank 0: attempt 1 starts at step [0-9]*" "$out/host0.log") ||
  fail "host 0's ranks were not restarted"
step=${resumed##* }
echo "shrink_test: host 1 killed at step 10 or so; host 0's two ranks resumed at step $step"
(( step > 0 )) || fail "the restart started afresh instead of resuming"

# The same path on purpose: two ranks resume from that checkpoint.
checkpoint=$(printf '%s/ckpt/step-%09d.ckpt' "$out" "$step")
bash "$TK_ON" on "${hosts[0]}" bash "$here/../torchrun_test.sh" --standalone -- \
  "$worker" shrink "$out/ckpt_reference" "$out/reference" "$checkpoint" \
  > "$out/reference.log" 2>&1 || fail "the reference run failed"
cmp "$out/elastic/final.pt" "$out/reference/final.pt" ||
  fail "the shrunk run's final parameters differ from the reference's"
echo "shrink_test: final parameters equal to the byte to two ranks resuming from $(basename "$checkpoint")"

awk -v samples=512 -f "$here/trained_once.awk" "$out"/elastic/seen.* ||
  fail "the interrupted epoch trained a sample twice or skipped one"
echo "shrink_test: the interrupted epoch trained each of its 512 samples once"
