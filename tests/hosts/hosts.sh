#!/usr/bin/env bash
# Hosts made of network namespaces, for tests of runs that span machines.
#
#   tests/hosts/hosts.sh N SCRIPT [ARGS...]
#     makes N hosts and runs `bash SCRIPT ARGS...` here with
#       TK_HOSTS  the hosts' names (also their hostnames), by index from 0
#       TK_ADDRS  their addresses, in the same order
#       TK_LINKS  the host-side end of each one's link (`ip link set L down` cuts it)
#       TK_ON     this script's path: `bash $TK_ON on HOST CMD...` runs CMD there
#     then removes everything it made: on success, failure, a signal, or
#     when SCRIPT passes TK_HOSTS_TIMEOUT seconds (240).
#   tests/hosts/hosts.sh on HOST CMD...
#     runs CMD on HOST: its network stack, hostname and /etc/hosts.
#   tests/hosts/hosts.sh down HOST
#     SIGKILLs every process on HOST, as a machine that dies whole.
#
# Each host is a network namespace with loopback up and one veth link
# (eth0, 10.201.0.<i+1>/24) to a bridge the fixture makes; the bridge has no
# address, so nothing leaves the hosts. `ip netns exec` mounts the host's own
# /etc/hosts (from /etc/netns/HOST/), which names every host, as a cluster's
# DNS would. Needs root (ip netns); without it the test is skipped (77).
set -euo pipefail

if [ "${1:-}" = on ]; then
  host=$2
  shift 2
  exec ip netns exec "$host" unshare --uts bash -c 'hostname "$0" && exec "$@"' "$host" "$@"
fi
# A process may exit between the listing and the kill (which then fails with
# "No such process"): kill until none is listed (a killed process awaiting
# its parent's wait is listed no more), for at most 5 s.
kill_all_on() {
  for _ in $(seq 50); do
    local doomed
    doomed=$(ip netns pids "$1" 2> /dev/null) || return 0
    [ -n "$doomed" ] || return 0
    # shellcheck disable=SC2086  # one pid per word
    kill -9 $doomed 2> /dev/null || true
    sleep 0.1
  done
}
if [ "${1:-}" = down ]; then
  kill_all_on "$2"
  exit 0
fi

count=$1
script=$2
shift 2
if [ "$(id -u)" != 0 ]; then
  echo "trainkit-skip: hosts in network namespaces need root (ip netns)"
  exit 77
fi
if ! command -v ip > /dev/null || ! command -v unshare > /dev/null; then
  echo "trainkit-skip: hosts in network namespaces need iproute2 and util-linux"
  exit 77
fi

prefix="tk$$"  # unique per fixture: tests may run side by side
bridge="${prefix}br"
hosts=()
links=()
addrs=()
for ((i = 0; i < count; ++i)); do
  hosts+=("${prefix}h$i")
  links+=("${prefix}l$i")
  addrs+=("10.201.0.$((i + 1))")
done

# Stops the test, kills what still runs on the hosts, then removes them,
# bounded in time.
child=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$child" ]; then kill -TERM "$child" 2> /dev/null || true; fi
  for h in "${hosts[@]}"; do
    if [ -e "/run/netns/$h" ]; then
      kill_all_on "$h"
      timeout 10 ip netns delete "$h" || echo "hosts.sh: could not delete namespace $h" >&2
    fi
    rm -rf "/etc/netns/$h"
  done
  for l in "${links[@]}" "$bridge"; do
    if ip link show "$l" > /dev/null 2>&1; then timeout 10 ip link delete "$l" || true; fi
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

# What a fixture killed outright (SIGKILL) left behind: its process is gone.
for stale in $(ip netns list | grep -oE '^tk[0-9]+h[0-9]+' || true); do
  pid=${stale#tk}
  pid=${pid%h*}
  if ! kill -0 "$pid" 2> /dev/null; then
    kill_all_on "$stale"
    ip netns delete "$stale" || true
    rm -rf "/etc/netns/$stale"
    ip link delete "tk${pid}br" 2> /dev/null || true
  fi
done

if ! ip link add "$bridge" type bridge 2> /tmp/hosts_err.$$; then
  echo "trainkit-skip: cannot make a bridge: $(cat /tmp/hosts_err.$$)"
  rm -f /tmp/hosts_err.$$
  exit 77
fi
rm -f /tmp/hosts_err.$$
ip link set "$bridge" up
hosts_file="127.0.0.1 localhost"$'\n'
for ((i = 0; i < count; ++i)); do hosts_file+="${addrs[i]} ${hosts[i]}"$'\n'; done
for ((i = 0; i < count; ++i)); do
  h=${hosts[i]}
  ip netns add "$h"
  mkdir -p "/etc/netns/$h"
  printf '%s' "$hosts_file" > "/etc/netns/$h/hosts"
  ip link add "${links[i]}" type veth peer name eth0 netns "$h"
  ip link set "${links[i]}" master "$bridge" up
  ip -n "$h" addr add "${addrs[i]}/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
done

export TK_HOSTS="${hosts[*]}" TK_ADDRS="${addrs[*]}" TK_LINKS="${links[*]}"
export TK_ON="${BASH_SOURCE[0]}"
# Its own time limit, inside CTest's, so that the cleanup above still runs.
timeout --kill-after 5 "${TK_HOSTS_TIMEOUT:-240}" bash "$script" "$@" &
child=$!
wait "$child"
