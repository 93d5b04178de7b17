#!/usr/bin/env bash
# A real Slurm on this machine: munged, slurmctld and slurmd (Debian's),
# one node on loopback, started here and stopped at the end (a trap).
#   slurm_test.sh DEMO WORKER OUT
# 1. `srun --ntasks 2` runs the demo's DDP (the ranks read SLURM_PROCID,
#    SLURM_NTASKS, SLURM_STEP_NODELIST).
# 2. A batch job of two tasks (tests/hosts/fault_worker.cpp shrink) is
#    requeued with `scontrol requeue` mid-epoch; Slurm starts it again and
#    it resumes from its newest checkpoint: its final parameters equal, to
#    the byte, two tasks resuming from that checkpoint on purpose, and the
#    interrupted epoch trains each sample once.
# Needs root and the packages slurmctld, slurmd, slurm-client and munge;
# skipped (77) without them.
set -euo pipefail
demo=$1
worker=$2
out=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for program in munged slurmctld slurmd srun sbatch scontrol; do
  if ! command -v "$program" > /dev/null && ! [ -x "/usr/sbin/$program" ]; then
    echo "trainkit-skip: no $program (Debian's slurmctld, slurmd, slurm-client and munge)"
    exit 77
  fi
done
if [ "$(nproc)" -lt 2 ]; then
  echo "trainkit-skip: two tasks need two CPUs here"
  exit 77
fi
if [ "$(id -u)" != 0 ]; then
  echo "trainkit-skip: the Slurm daemons run as root here"
  exit 77
fi
export PATH="$PATH:/usr/sbin"
rm -rf "$out" && mkdir -p "$out"
work=$(mktemp -d /tmp/trainkit-slurm.XXXXXX)  # short: munge's socket path
chmod 700 "$work"
cleanup() {
  local rc=$?
  for pid_file in "$work"/slurmd.pid "$work"/slurmctld.pid "$work"/munged.pid; do
    [ -s "$pid_file" ] && kill "$(cat "$pid_file")" 2> /dev/null || true
  done
  sleep 0.5
  for pid_file in "$work"/slurmd.pid "$work"/slurmctld.pid "$work"/munged.pid; do
    [ -s "$pid_file" ] && kill -9 "$(cat "$pid_file")" 2> /dev/null || true
  done
  cp "$work"/*.log "$out"/ 2> /dev/null || true
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' INT TERM
fail() { echo "slurm_test: $*" >&2; tail -n 15 "$out"/*.out "$work"/*.log >&2 2> /dev/null; exit 1; }

# Ports of its own (tests run side by side), as scripts/launch.sh picks.
base=$((20000 + ($$ * 7919) % 4000 * 3))  # below the kernel's ephemeral range
ctld_port=$base slurmd_port=$((base + 1))
export MASTER_PORT=$((base + 2))

head -c 1024 /dev/urandom > "$work/munge.key"
chmod 400 "$work/munge.key"
munged --socket="$work/munge.sock" --key-file="$work/munge.key" --log-file="$work/munged.log" \
  --pid-file="$work/munged.pid" --seed-file="$work/munged.seed" --force
node=$(hostname)
cat > "$work/slurm.conf" << CONF
ClusterName=trainkit
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$work/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SlurmUser=root
SlurmdUser=root
KillWait=5
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=trainkit Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
mkdir -p "$work/state" "$work/spool"
export SLURM_CONF="$work/slurm.conf"
slurmctld -i
slurmd
for _ in $(seq 300); do
  [ "$(sinfo -h -o %t 2> /dev/null)" = idle ] && break
  sleep 0.1
done
[ "$(sinfo -h -o %t)" = idle ] || fail "the Slurm node did not come up: $(sinfo -h 2>&1)"
echo "slurm_test: slurmctld and slurmd up on $node (ports $ctld_port, $slurmd_port)"

# 1. The demo's DDP under srun.
OMP_NUM_THREADS=1 timeout 120 srun --ntasks 2 "$demo" --ddp --epochs 1 --train-size 256 \
  --val-size 64 --runs-dir "$out/demo" > "$out/demo.out" 2>&1 || fail "srun of the demo failed"
# One report (rank 0's), of 2 steps: each rank trained half of the 4 batches.
[ "$(grep -c "^final: val_accuracy" "$out/demo.out")" = 1 ] || fail "not one rank 0 reported"
grep -q "^fit: 2 steps" "$out/demo.out" || fail "the two tasks did not split the data (4 steps alone)"
echo "slurm_test: srun --ntasks 2 trained the demo: $(grep 'final:' "$out/demo.out")"

# 2. A requeued job resumes from its checkpoint.
cat > "$work/job.sh" << JOB
#!/bin/bash
OMP_NUM_THREADS=1 srun --ntasks 2 "$worker" shrink "$out/ckpt" "$out/job"
JOB
job=$(sbatch --parsable --requeue --ntasks 2 -o "$out/job.out" --open-mode=append "$work/job.sh")
for _ in $(seq 600); do
  grep -q "rank 0: step 10$" "$out/job.out" 2> /dev/null && break
  sleep 0.1
done
grep -q "rank 0: step 10$" "$out/job.out" || fail "job $job did not reach step 10 within 60 s"
scontrol requeue "$job"
# Slurm holds a requeued job for 2 minutes: release it once it is pending
# and its first run has left the node, and 2 s later: slurmd refuses a
# credential issued in the second it revoked the job's old one ("Job
# credential revoked"), which ends the job FAILED.
for _ in $(seq 300); do
  scontrol show job "$job" | grep -q "JobState=PENDING" &&
    [ "$(sinfo -h -o %t)" = idle ] && break
  sleep 0.1
done
sleep 2
scontrol update jobid="$job" StartTime=now
for _ in $(seq 1200); do
  state=$(scontrol show job "$job" | grep -o "JobState=[A-Z_]*")
  [ "$state" = JobState=COMPLETED ] && break
  # FAILED shows for a moment as the requeue stops the first run: only the
  # second run's end counts.
  if [[ "$state" == JobState=FAILED || "$state" == JobState=CANCELLED ]] &&
    grep -q "attempt 1 starts" "$out/job.out"; then
    fail "job $job: $state"
  fi
  sleep 0.1
done
[ "$state" = JobState=COMPLETED ] || fail "job $job did not complete within 120 s ($state)"
resumed=$(grep -ho "rank 0: attempt 1 starts at step [0-9]*" "$out/job.out") ||
  fail "job $job was not started again"
step=${resumed##* }
(( step > 0 )) || fail "the requeued job started fresh instead of resuming"
echo "slurm_test: job $job requeued at step 10 or so, resumed at step $step"

checkpoint=$(printf '%s/ckpt/step-%09d.ckpt' "$out" "$step")
OMP_NUM_THREADS=1 timeout 120 srun --ntasks 2 "$worker" shrink "$out/ckpt_reference" \
  "$out/reference" "$checkpoint" > "$out/reference.out" 2>&1 || fail "the reference run failed"
cmp "$out/job/final.pt" "$out/reference/final.pt" ||
  fail "the requeued job's final parameters differ from the reference's"
awk -v samples=512 -f "$here/../hosts/trained_once.awk" "$out"/job/seen.* ||
  fail "the interrupted epoch trained a sample twice or skipped one"
echo "slurm_test: final parameters equal to the byte to a resume from $(basename "$checkpoint")," \
  "and the interrupted epoch trained each sample once"
