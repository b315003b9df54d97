#!/usr/bin/env bash
# An emulated cluster on one machine: N "nodes", each a network namespace with its own interface,
# address and hostname (UTS namespace), joined by a bridge, with an optional bandwidth limit per
# node and direction (tc tbf). Runs COMMAND on node 1 with the environment below, then tears
# everything down. Everything lives inside a private parent (unshare -n -m): the bridge, the
# namespaces and their /run/netns mounts vanish with it, and the host's own network is never
# touched. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); exits 77 with the reason where namespaces
# cannot be made (a container without those rights), so ctest reports the tests Skipped.
#
#   emulated_cluster.sh [--nodes N] [--rate RATE] -- COMMAND [ARGS...]
#     --nodes N    number of nodes (default 2, at most 250)
#     --rate RATE  per-node link bandwidth in each direction, in tc's units (1gbit, 500mbit);
#                  default: unlimited (veth speed)
#     --queue-ms Q with --rate: the most a packet may wait in a link's queue (tbf latency,
#                  default 5 ms; a switch port holds a few ms; a long queue delays the ACKs of
#                  traffic in the other direction and halves what a full-duplex exchange gets)
#
# COMMAND sees (and tests/cluster/cluster_mpirun.sh uses):
#   DRT_CLUSTER_NODES     N
#   DRT_CLUSTER_ADDRS     node addresses, comma-separated (node i is 10.231.0.i)
#   DRT_CLUSTER_SUBNET    the nodes' /24
#   DRT_CLUSTER_AGENT     the remote-shell agent: `agent HOST CMD...` runs CMD on that node
#                         (Open MPI's plm_rsh_agent, MPICH Hydra's -launcher-exec)
#   DRT_CLUSTER_DIR       a scratch folder shared by all nodes (like an NFS home)
#   DRT_CLUSTER_RATE      the bandwidth limit or "none"
# and node_exec (below) is usable as `"$DRT_CLUSTER_AGENT" nodeK CMD` for anything else, e.g.
# `ip link set eth0 down` on node K to cut its link.
set -euo pipefail

nodes=2
rate=none
queue_ms=5
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --queue-ms) queue_ms=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "emulated_cluster: unknown option '$1' (usage: emulated_cluster.sh [--nodes N] [--rate RATE] -- COMMAND...)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "emulated_cluster: no COMMAND given" >&2; exit 2; }
if ! [[ $nodes =~ ^[0-9]+$ ]] || [ "$nodes" -lt 1 ] || [ "$nodes" -gt 250 ]; then
  echo "emulated_cluster: --nodes must be 1..250, got '$nodes'" >&2; exit 2
fi

self=$(readlink -f "${BASH_SOURCE[0]}")
subnet_prefix=10.231.0

# ---- outside: enter the private parent (new network and mount namespaces) and run again there.
if [ -z "${DRT_CLUSTER_PARENT:-}" ]; then
  why=""
  if [ "$(id -u)" -ne 0 ]; then why="needs root to create network namespaces (run as root)"
  else
    for tool in ip tc unshare nsenter; do
      command -v $tool >/dev/null || { why="'$tool' is missing (apt-get install iproute2 util-linux)"; break; }
    done
  fi
  if [ -z "$why" ] && ! unshare -n -m true 2>/dev/null; then
    why="this machine does not allow new network/mount namespaces (unshare -n -m failed: a container without CAP_SYS_ADMIN?)"
  fi
  if [ -n "$why" ]; then echo "SKIP: emulated cluster: $why"; exit 77; fi
  exec env DRT_CLUSTER_PARENT=1 unshare -n -m --propagation private -- "$self" --nodes "$nodes" --rate "$rate" \
    --queue-ms "$queue_ms" -- "$@"
fi

# ---- inside the private parent
work=$(mktemp -d "${TMPDIR:-/tmp}/drt-cluster.XXXXXX")
cleanup() {
  local i
  for i in $(seq 1 "$nodes"); do
    pids=$(ip netns pids "node$i" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p /run/netns
mount -t tmpfs -o size=1m drt-netns /run/netns  # private to this mount namespace
ip link set lo up
ip link add br0 type bridge
ip link set br0 up

limit() {  # limit NETNS DEV: egress of DEV, inside namespace NETNS ("" = the parent)
  [ "$rate" = none ] && return 0
  local ns=()
  [ -n "$1" ] && ns=(ip netns exec "$1")
  "${ns[@]}" tc qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency "${queue_ms}ms"
}

addrs=()
for i in $(seq 1 "$nodes"); do
  ip netns add "node$i"
  ip link add "veth$i" type veth peer name eth0 netns "node$i"
  ip link set "veth$i" master br0 up
  ip -n "node$i" link set lo up
  ip -n "node$i" addr add "$subnet_prefix.$i/24" dev eth0
  ip -n "node$i" link set eth0 up
  limit "" "veth$i"      # into node i
  limit "node$i" eth0    # out of node i
  addrs+=("$subnet_prefix.$i")
  echo "$subnet_prefix.$i node$i" >> "$work/hosts"
done

# The agent: `agent [-options] HOST COMMAND...`, HOST an address or a node name. Like ssh it
# hands the command to a shell on that node, in the node's namespace with the node's hostname.
cat > "$work/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case \$host in
  $subnet_prefix.*) node=node\${host##*.} ;;
  node*) node=\$host ;;
  *) echo "emulated_cluster agent: unknown host '\$host'" >&2; exit 255 ;;
esac
exec ip netns exec "\$node" unshare --uts sh -c "hostname \$node; \$*"
EOF
chmod +x "$work/agent"

export DRT_CLUSTER_NODES=$nodes
export DRT_CLUSTER_ADDRS
DRT_CLUSTER_ADDRS=$(IFS=,; echo "${addrs[*]}")
export DRT_CLUSTER_SUBNET=$subnet_prefix.0/24
export DRT_CLUSTER_AGENT=$work/agent
export DRT_CLUSTER_DIR=$work
export DRT_CLUSTER_RATE=$rate

# Run COMMAND on node 1 (not exec: the trap tears the cluster down afterwards).
status=0
ip netns exec node1 unshare --uts -- sh -c 'hostname node1; exec "$@"' sh "$@" || status=$?
exit $status
