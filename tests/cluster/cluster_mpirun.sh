#!/usr/bin/env bash
# Starts an MPI job on the emulated cluster (run it inside tests/cluster/emulated_cluster.sh):
# PPN ranks on each node, ranks numbered node by node (node 1 holds ranks 0..PPN-1), through
# the cluster's remote-shell agent, with TCP restricted to the cluster's subnet.
#
#   cluster_mpirun.sh openmpi|mpich [--ppn K] [--nodes N] [--env VAR]... -- PROGRAM [ARGS...]
#     --ppn K     ranks per node (default 2)
#     --nodes N   use the first N nodes (default: all)
#     --env VAR   pass the launcher's value of VAR to every rank (Open MPI only needs this;
#                 MPICH's Hydra passes the whole environment)
#
# Open MPI: mpirun --hostfile (ADDR slots=K per node), plm_rsh_agent = the agent, oob and btl/tcp
#           on the subnet. OMPI_MCA_* set by the caller reach every rank (-x).
# MPICH:    mpiexec.mpich -launcher ssh -launcher-exec AGENT -hosts ADDR:K,...
# Either way UCX (osc/ucx, MPICH's ch4:ucx) is told to use TCP on eth0 between nodes and shared
# memory within one: UCX would otherwise also find the namespaces' common /dev/shm and take
# shared memory between "nodes", which a real cluster does not have.
set -euo pipefail

mpi=${1:-}; shift || true
ppn=2
use_nodes=${DRT_CLUSTER_NODES:?run inside tests/cluster/emulated_cluster.sh}
envs=()
while [ $# -gt 0 ]; do
  case $1 in
    --ppn) ppn=$2; shift 2 ;;
    --nodes) use_nodes=$2; shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "cluster_mpirun: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "cluster_mpirun: no PROGRAM given" >&2; exit 2; }
IFS=, read -r -a addrs <<< "$DRT_CLUSTER_ADDRS"
addrs=("${addrs[@]:0:$use_nodes}")
np=$(( ppn * ${#addrs[@]} ))

# UCX between namespaces: TCP over the emulated link, self and shared memory inside a rank/node.
# (UCX checks neither network nor UTS namespaces before using shared memory, so "sm" between
# ranks of different nodes would bypass the link; restricting to tcp is the honest emulation.)
export UCX_TLS=${UCX_TLS:-tcp,self}
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-eth0}
export UCX_WARN_UNUSED_ENV_VARS=n

case $mpi in
  openmpi)
    hostfile=$DRT_CLUSTER_DIR/hostfile.$$
    : > "$hostfile"
    for a in "${addrs[@]}"; do echo "$a slots=$ppn" >> "$hostfile"; done
    xs=(-x UCX_TLS -x UCX_NET_DEVICES -x UCX_WARN_UNUSED_ENV_VARS)
    for v in $(env | sed -n 's/^\(OMPI_MCA_[A-Za-z0-9_]*\)=.*/\1/p'); do
      case $v in OMPI_MCA_plm_rsh_agent|OMPI_MCA_orte_*|OMPI_MCA_ess_*|OMPI_MCA_pmix_*) ;; *) xs+=(-x "$v") ;; esac
    done
    for v in "${envs[@]}"; do xs+=(-x "$v"); done
    exec mpirun --allow-run-as-root --oversubscribe -n "$np" --hostfile "$hostfile" --map-by slot \
      --mca plm_rsh_agent "$DRT_CLUSTER_AGENT" \
      --mca oob_tcp_if_include "$DRT_CLUSTER_SUBNET" --mca btl_tcp_if_include "$DRT_CLUSTER_SUBNET" \
      "${xs[@]}" "$@"
    ;;
  mpich)
    hosts=$(printf "%s:$ppn," "${addrs[@]}")
    exec mpiexec.mpich -launcher ssh -launcher-exec "$DRT_CLUSTER_AGENT" -hosts "${hosts%,}" -n "$np" "$@"
    ;;
  *) echo "cluster_mpirun: first argument must be openmpi or mpich, got '$mpi'" >&2; exit 2 ;;
esac
