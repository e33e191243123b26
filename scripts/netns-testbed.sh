#!/bin/bash
# A multi-node test bed on one machine: each "node" is a network namespace
# (strata-node0, strata-node1, ...) with its own eth0 on 192.0.2.0/24 (an
# address block that never leaves the machine), all joined by veth pairs to a
# bridge inside a hub namespace, so nothing touches the host's own interfaces.
#
#   scripts/netns-testbed.sh up N [RATE]   create N nodes; RATE (e.g. 1gbit) shapes every node link both ways
#   scripts/netns-testbed.sh shape RATE    (re)shape the existing links; "none" removes shaping
#   scripts/netns-testbed.sh down          remove everything this script made (idempotent)
#   scripts/netns-testbed.sh status        list the nodes and their addresses
#
# Node k has address 192.0.2.(101+k). Shaping uses htb (netem is not in these
# kernels) with burst 256k, without which htb falls well short of its rate.
# Exits 77 (the test suite's "skipped") when not run as root.
set -euo pipefail

PREFIX=strata-node
HUB=strata-hub

if [ "$(id -u)" != 0 ]; then
  echo "netns test bed: needs root to create network namespaces; skipping" >&2
  exit 77
fi
command -v ip >/dev/null || { echo "netns test bed: 'ip' not found (apt-get install iproute2); skipping" >&2; exit 77; }

nodes() { ip netns list | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" | sort -V || true; }

down() {
  for ns in $(nodes) $(ip netns list | awk '{print $1}' | grep -x "$HUB" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
}

shape_dev() {  # namespace device rate
  tc -n "$1" qdisc del dev "$2" root 2>/dev/null || true
  [ "$3" = none ] && return 0
  tc -n "$1" qdisc add dev "$2" root handle 1: htb default 10
  tc -n "$1" class add dev "$2" parent 1: classid 1:10 htb rate "$3" ceil "$3" burst 256k cburst 256k quantum 60000
}

shape() {
  local i=0
  for ns in $(nodes); do
    shape_dev "$ns" eth0 "$1"       # node -> bridge
    shape_dev "$HUB" "n$i" "$1"     # bridge -> node
    i=$((i + 1))
  done
}

up() {
  local n=$1 rate=${2:-none}
  down
  ip netns add "$HUB"
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" link set br0 up
  for ((i = 0; i < n; i++)); do
    local ns=$PREFIX$i
    ip netns add "$ns"
    ip link add "n$i" netns "$HUB" type veth peer name eth0 netns "$ns"
    ip -n "$HUB" link set "n$i" master br0 up
    ip -n "$ns" addr add "192.0.2.$((101 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  shape "$rate"
  echo "netns test bed: $n node(s) up, links ${rate}"
}

case "${1:-}" in
  up) up "${2:?node count}" "${3:-none}" ;;
  shape) shape "${2:?rate or none}" ;;
  down) down ;;
  status)
    for ns in $(nodes); do echo "$ns $(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}')"; done ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
