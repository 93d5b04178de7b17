#!/usr/bin/env bash
# Faults on two hosts of two ranks each, fully sharded (tests/hosts/fault_worker.cpp
# under scripts/launch.sh, one per host; ranks 0-1 on host 0, 2-3 on host 1),
# run by tests/hosts/hosts.sh:
#   faults_test.sh WORKER OUT
# Each fault breaks a fresh run after host 1 reports step 6. Every rank that
# survives it must stop with a trainkit::Error naming the collective and the
# timeout (3 s) within 10 s more, and the checkpoint folder must hold no
# partial file. OUT/faults.md gets the table docs/benchmarks.md shows.
set -euo pipefail
worker=$1
out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
read -ra hosts <<< "$TK_HOSTS"
read -ra links <<< "$TK_LINKS"
timeout_s=3 margin_s=10
rm -rf "$out" && mkdir -p "$out"
now() { date +%s.%N; }
fail() { echo "faults_test: $*" >&2; tail -n 6 "$out"/*.log >&2; exit 1; }
{
  echo "| fault | rank (host) | stopped after the fault | what it said |"
  echo "|---|---|---|---|"
} > "$out/faults.md"

# start NAME [KILL_BEFORE STEP]: the four ranks, logs in $out/NAME.host{0,1}.log
start() {
  local name=$1
  shift
  pids=()
  for node in 0 1; do
    OMP_NUM_THREADS=1 bash "$TK_ON" on "${hosts[node]}" bash "$here/../../scripts/launch.sh" \
      -n 2 --nnodes 2 --node-rank "$node" --master-addr "${hosts[0]}" --port 29500 --grace 30 \
      -- "$worker" fault "$out/$name.ckpt" "$timeout_s" "$@" > "$out/$name.host$node.log" 2>&1 &
    pids+=($!)
  done
}
wait_for() {  # wait_for FILE PATTERN: up to 60 s
  for _ in $(seq 600); do
    grep -q "$2" "$1" 2> /dev/null && return 0
    sleep 0.1
  done
  fail "no \"$2\" in $1 within 60 s"
}
# finish NAME FAULT_TIME SURVIVORS...: every survivor stopped with the Error, in time,
# its roll call as `expect` says for its host (a pattern per host; empty: any)
finish() {
  local name=$1 fault=$2
  shift 2
  for pid in "${pids[@]}"; do wait "$pid" || true; done
  for rank in "$@"; do
    local line host=$((rank / 2))
    line=$(grep -h "^rank $rank: error at " "$out/$name.host$host.log") ||
      fail "$name: rank $rank did not stop with a trainkit::Error"
    local at=${line#rank $rank: error at }
    at=${at%%:*}
    local what=${line#*: error at *: }
    local after
    after=$(awk -v a="$at" -v f="$fault" 'BEGIN { printf "%.1f", a - f }')
    [[ "$what" == *"collective \`"*"(timeout ${timeout_s}.0 s)"* ]] ||
      fail "$name: rank $rank's error names no collective or timeout: $what"
    [[ "$what" =~ ${expect[host]} ]] ||
      fail "$name: rank $rank's error does not say \"${expect[host]}\" of the roll call: $what"
    awk -v d="$after" -v m="$((timeout_s + margin_s))" 'BEGIN { exit !(d <= m) }' ||
      fail "$name: rank $rank stopped ${after} s after the fault (bound: $((timeout_s + margin_s)) s)"
    echo "| $name | $rank ($host) | ${after} s | ${what//|/\\|} |" >> "$out/faults.md"
  done
  if find "$out/$name.ckpt" \( -name '*.tmp.*' -o -name '*.partial' \) | grep -q .; then
    fail "$name: a partial checkpoint was left: $(find "$out/$name.ckpt" -name '*.tmp.*' -o -name '*.partial')"
  fi
  ls "$out/$name.ckpt"/step-*.ckpt > /dev/null 2>&1 || fail "$name: no checkpoint was written before the fault"
  echo "faults_test: $name: ranks $* stopped, no partial checkpoint"
}

# A link cut mid-step: both hosts' ranks wait out the timeout.
start link_down
wait_for "$out/link_down.host1.log" "^rank 2: step 6$"
fault=$(now)
ip link set "${links[1]}" down
expect=("ranks 2, 3 of the group did not answer" "rendezvous store did not answer")
finish link_down "$fault" 0 1 2 3
ip link set "${links[1]}" up

# A link slowed to a crawl (1 kB/s into host 1): a step's collectives cannot finish in time.
start link_crawl
wait_for "$out/link_crawl.host1.log" "^rank 2: step 6$"
fault=$(now)
tc qdisc add dev "${links[1]}" root tbf rate 8kbit burst 1600 latency 1s
expect=("roll call" "roll call")  # a crawl may carry the few bytes of the answers, or not
finish link_crawl "$fault" 0 1 2 3
tc qdisc del dev "${links[1]}" root

# Rank 3 SIGKILLed just before a reduce-scatter, then before an all-gather.
for kind in reduce-scatter all-gather; do
  start "kill_$kind" "$kind" 6
  wait_for "$out/kill_$kind.host1.log" "^rank 3: killed before"
  line=$(grep -h "^rank 3: killed before" "$out/kill_$kind.host1.log")
  expect=("rank 3 of the group did not answer" "rank 3 of the group did not answer")
  finish "kill_$kind" "${line##* at }" 0 1 2
done

# Host 0 dies whole: both of its ranks, its launcher, and the store rank 0 serves.
start host_down
wait_for "$out/host_down.host1.log" "^rank 2: step 6$"
fault=$(now)
bash "$TK_ON" down "${hosts[0]}"
expect=("" "rendezvous store did not answer")
finish host_down "$fault" 2 3
cat "$out/faults.md"
