#!/usr/bin/env bash
# scripts/launch.sh --independent, run as a command (its run bit): a worker
# that fails is reported and the others finish their work; the launch exits
# with the failure's status. Workers get LOCAL_RANK, and no rank variables
# even under a launcher that set them.
set -euo pipefail
launch="$(cd "$(dirname "$0")/.." && pwd)/scripts/launch.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
worker='
  [ "$LOCAL_RANK" = 1 ] && exit 3
  sleep 2  # longer than the failure takes to be seen, and than --grace
  echo "${RANK:-none} ${WORLD_SIZE:-none} ${MASTER_PORT:-none} ${SLURM_PROCID:-none}" \
       "$LOCAL_WORLD_SIZE" >"$0/done.$LOCAL_RANK"'
rc=0
# --grace 0: ranks of one job would be stopped at once, so workers that
# finish show this is the other mode.
RANK=5 WORLD_SIZE=8 MASTER_PORT=29500 SLURM_PROCID=3 \
  "$launch" --independent --grace 0 -n 3 -- bash -c "$worker" "$work" 2>"$work/stderr" || rc=$?
cat "$work/stderr"
fail() { echo "FAILED: $*" >&2; exit 1; }
[ "$rc" -eq 3 ] || fail "exit status $rc, expected the failed worker's 3"
for i in 0 2; do
  [ -f "$work/done.$i" ] || fail "worker $i was stopped; independent workers go on"
  [ "$(cat "$work/done.$i")" = "none none none none 3" ] ||
    fail "worker $i saw RANK WORLD_SIZE MASTER_PORT SLURM_PROCID LOCAL_WORLD_SIZE =" \
         "$(cat "$work/done.$i")"
done
grep -q "worker 1 exited with status 3" "$work/stderr" || fail "the failed worker was not reported"
grep -q "2 of 3 workers succeeded; failed: 1" "$work/stderr" || fail "no summary line"
rc=0
out=$("$launch" --independent --port 29500 -n 2 -- true 2>&1) || rc=$?
[ "$rc" -eq 2 ] && grep -q "independent workers have no master" <<<"$out" ||
  fail "--port with --independent: status $rc, $out"
echo "independent workers: worker 1 failed, 0 and 2 finished, exit status 3"
