#!/usr/bin/env bash
# Starts N local processes of a command.
#
# Ranks of one job (the default), for parallel::DDP and parallel::ZeroSharded:
#
#   scripts/launch.sh -n 2 [--port P] [--grace S] -- ./build/demo/examples/demo --ddp
#
# each with the environment torchrun gives (RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). On several hosts, the same
# command on each with its node's rank and node 0's address and a port:
#
#   scripts/launch.sh -n 2 --nnodes 2 --node-rank 0 --master-addr node0 --port 29500 -- ...
#
# (ranks node_rank * n ... node_rank * n + n - 1). When one process fails, the
# others get `--grace` seconds (default 10) to report their own error (a
# collective that lost its peer fails within the trainer's timeout), then are
# terminated.
#
# Independent workers (hyperparameter search: each pulls its own trials):
#
#   scripts/launch.sh --independent -n 4 -- ./build/demo/examples/tune --storage s.db
#
# each with LOCAL_RANK and LOCAL_WORLD_SIZE only (one GPU per worker:
# cuda:LOCAL_RANK), no RANK, WORLD_SIZE or MASTER_*: they are not one job.
# A worker that fails is reported and the others go on.
#
# Either way: exits with the first failure's status, or 0.
set -uo pipefail

nproc=1 port="" grace=10 independent="" nnodes=1 node_rank=0 master_addr=127.0.0.1
while [ $# -gt 0 ]; do
  case "$1" in
    -n|--nproc) nproc="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --nnodes) nnodes="$2"; shift 2 ;;
    --node-rank) node_rank="$2"; shift 2 ;;
    --master-addr) master_addr="$2"; shift 2 ;;
    --grace) grace="$2"; shift 2 ;;
    --independent) independent=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ] || ! [[ "$nproc" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [--independent] -n N [--port P] [--grace S]" \
       "[--nnodes M --node-rank R --master-addr HOST --port P] -- command [args...]" >&2
  exit 2
fi
if ! [[ "$nnodes" =~ ^[1-9][0-9]*$ ]] || ! [[ "$node_rank" =~ ^[0-9]+$ ]] ||
   ((node_rank >= nnodes)); then
  echo "launch.sh: --node-rank $node_rank of --nnodes $nnodes: accepted, 0 <= node rank < nodes" >&2
  exit 2
fi
if ((nnodes > 1)) && { [ -z "$port" ] || [ "$master_addr" = 127.0.0.1 ] || [ -n "$independent" ]; }; then
  echo "launch.sh: --nnodes $nnodes needs --master-addr (node 0's address) and --port," \
       "the same on every node (and is for ranks of one job, not --independent)" >&2
  exit 2
fi

if [ -n "$independent" ] && [ -n "$port" ]; then
  echo "launch.sh: --port is for ranks of one job; --independent workers have no master" >&2
  exit 2
fi

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [ -z "$port" ] && [ -z "$independent" ]; then
  # Distinct per launcher (concurrent test runs), then the first free one;
  # the program may use the next seven ports for further process groups. Outside
  # the kernel's ephemeral range: a port there may be held by any outgoing
  # connection, which the probe below does not see, and the bind then fails.
  low=32768 high=60999
  read -r low high 2>/dev/null </proc/sys/net/ipv4/ip_local_port_range || true
  base=10000 span=$((low - 10000 - 64))  # below the range
  if ((span < 1000)); then base=$((high + 1)) span=$((65535 - 64 - high)); fi  # above it
  if ((span < 1000)); then base=20000 span=30000; fi  # no room outside: take the chance
  port=$((base + ($$ * 7919) % span))
  ports_in_use() { for i in 0 1 2 3 4 5 6 7; do port_in_use $(($1 + i)) && return 0; done; return 1; }
  while ports_in_use "$port"; do
    port=$((port + 8))
  done
fi

pids=()
for ((rank = 0; rank < nproc; rank++)); do
  if [ -n "$independent" ]; then
    # a launcher above this one (torchrun, srun) must not make them ranks
    env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u GROUP_RANK \
      -u SLURM_PROCID -u SLURM_NTASKS -u SLURM_LOCALID \
      LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$nproc "$@" &
  else
    RANK=$((node_rank * nproc + rank)) WORLD_SIZE=$((nnodes * nproc)) LOCAL_RANK=$rank \
      LOCAL_WORLD_SIZE=$nproc MASTER_ADDR=$master_addr MASTER_PORT=$port "$@" &
  fi
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null; exit 130' INT TERM

status=0 left=$nproc deadline="" failed=()
while [ "$left" -gt 0 ]; do
  if [ -n "$deadline" ] && [ "$(date +%s)" -ge "$deadline" ]; then
    echo "launch.sh: stopping the ranks still running after a failure" >&2
    kill "${pids[@]}" 2>/dev/null
    wait 2>/dev/null
    break
  fi
  for i in "${!pids[@]}"; do
    pid=${pids[$i]}
    [ -z "$pid" ] && continue
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"
    rc=$?
    pids[$i]=""
    left=$((left - 1))
    if [ "$rc" -ne 0 ]; then
      if [ -n "$independent" ]; then
        echo "launch.sh: worker $i exited with status $rc; $left other(s) still running go on" >&2
        failed+=("$i")
      elif [ "$status" -eq 0 ]; then
        echo "launch.sh: rank $i exited with status $rc" >&2
        deadline=$(($(date +%s) + grace))
      fi
      [ "$status" -eq 0 ] && status=$rc
    fi
  done
  [ "$left" -gt 0 ] && sleep 0.1
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "launch.sh: $((nproc - ${#failed[@]})) of $nproc workers succeeded; failed: ${failed[*]}" >&2
fi
exit "$status"
