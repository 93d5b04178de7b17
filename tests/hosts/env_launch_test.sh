#!/usr/bin/env bash
# Two hosts, one rank each, started as a launcher starts them (RANK,
# WORLD_SIZE, MASTER_ADDR = host 0's name): run by tests/hosts/hosts.sh.
#   env_launch_test.sh DEMO OUT
# 1. Without GLOO_SOCKET_IFNAME each rank binds Gloo to the interface that
#    routes to MASTER_ADDR (it used to bind to the loopback address the
#    hostname resolves to, and the peers could not connect), and says so.
# 2. With Gloo bound to loopback on both hosts, the rank that cannot connect
#    ends, and the other stops with its words at once instead of waiting out
#    the 30-minute timeout.
set -euo pipefail
demo=$1
out=$2
read -ra hosts <<< "$TK_HOSTS"
read -ra addrs <<< "$TK_ADDRS"
rm -rf "$out" && mkdir -p "$out"

# run_ranks NAME [VAR=VALUE...]: both ranks, each on its host; their exit codes in $out/NAME.rc.
run_ranks() {
  local name=$1
  shift
  local pids=()
  for rank in 0 1; do
    bash "$TK_ON" on "${hosts[rank]}" env "$@" RANK=$rank WORLD_SIZE=2 LOCAL_RANK=0 \
      LOCAL_WORLD_SIZE=1 MASTER_ADDR="${hosts[0]}" MASTER_PORT=29500 OMP_NUM_THREADS=1 \
      "$demo" --ddp --epochs 1 --train-size 256 --val-size 64 --runs-dir "$out/$name$rank" \
      > "$out/$name$rank.log" 2>&1 &
    pids+=($!)
  done
  : > "$out/$name.rc"
  for pid in "${pids[@]}"; do
    rc=0
    wait "$pid" || rc=$?
    echo "$rc" >> "$out/$name.rc"
  done
}

fail() {
  echo "env_launch_test: $*" >&2
  tail -n 5 "$out"/*.log >&2
  exit 1
}

run_ranks routed
[ "$(cat "$out/routed.rc" | tr '\n' ' ')" = "0 0 " ] || fail "a rank failed: exit codes $(cat "$out/routed.rc" | tr '\n' ' ')"
grep -q "final: val_accuracy" "$out/routed0.log" || fail "rank 0 did not finish"
grep -qF "rank 1 of 2: gloo binds to eth0 (${addrs[1]}), the route to MASTER_ADDR ${hosts[0]}" \
  "$out/routed1.log" || fail "rank 1 does not name the interface it chose"
echo "env_launch_test: both ranks trained; rank 1: $(grep 'gloo binds' "$out/routed1.log")"

start=$SECONDS
run_ranks loopback GLOO_SOCKET_IFNAME=lo
took=$((SECONDS - start))
[ "$(cat "$out/loopback.rc" | tr '\n' ' ')" != "0 0 " ] || fail "both ranks trained over loopback"
for rank in 0 1; do
  grep -q "rank $rank of 2: cannot connect the gloo process group: .*Connection refused" \
    "$out/loopback$rank.log" || fail "rank $rank does not say why it stopped"
done
[ "$took" -lt 60 ] || fail "the ranks took ${took} s to stop (the peer's failure should end them at once)"
echo "env_launch_test: over loopback both ranks stopped in ${took} s, each with the refused connection"
