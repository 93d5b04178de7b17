#!/usr/bin/env bash
# scripts/launch.sh picks MASTER_PORT (and the two after it) below the
# kernel's ephemeral port range, where no outgoing connection can hold it
# (ddp.unused_parameters once failed to bind a port that one held).
set -euo pipefail
launch="$(dirname "$0")/../scripts/launch.sh"
read -r low _ </proc/sys/net/ipv4/ip_local_port_range
for _ in $(seq 40); do
  port=$(bash "$launch" -n 1 -- bash -c 'echo "$MASTER_PORT"')
  if ((port < 1024 || port + 2 >= low)); then
    echo "launch.sh chose port $port; the ephemeral range starts at $low" >&2
    exit 1
  fi
done
echo "40 launches chose ports below $low"
