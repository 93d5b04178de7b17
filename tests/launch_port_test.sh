#!/usr/bin/env bash
# scripts/launch.sh picks MASTER_PORT (and the two after it) outside the
# kernel's ephemeral port range, where no outgoing connection can hold it
# (ddp.unused_parameters once failed to bind a port that one held).
set -euo pipefail
launch="$(dirname "$0")/../scripts/launch.sh"
read -r low high </proc/sys/net/ipv4/ip_local_port_range
if ((low - 10000 < 1064 && 65535 - high < 1064)); then
  echo "no room outside the ephemeral range $low-$high: skipped"
  exit 77
fi
for _ in $(seq 40); do
  port=$(bash "$launch" -n 1 -- bash -c 'echo "$MASTER_PORT"')
  if ((port < 1024 || (port + 2 >= low && port <= high))); then
    echo "launch.sh chose port $port, in the ephemeral range $low-$high" >&2
    exit 1
  fi
done
echo "40 launches chose ports outside $low-$high"
