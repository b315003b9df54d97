#!/usr/bin/env bash
# Runs drt_bench_exchange (the SMPI build, build-smpi/) in SimGrid's simulated network: writes a
# fat-tree platform (scripts/smpi_platform.py) and a hostfile mapping ranks to hosts, runs smpirun
# with the settings docs/SIMULATION.md explains, and prints the bench's table (its last line is
# the bench's JSON). Options (each with its default):
#   --nodes 8 --ps 2 --layout dedicated|colocated --gbit 25 --lat-us 2 --oversub 1 --build build-smpi
#   --flat (one switch, as the emulated cluster's bridge: scripts/smpi_platform.py --flat)
#   --fold (memory folding, DRT_SMPI_FOLD=1: the ranks' large buffers share pages, so hundreds of
#     nodes fit in memory; the bench's exactness check is skipped; docs/SIMULATION.md)
#   --no-compute (smpi/simulate-computation:no: the ranks' own CPU time between MPI calls is not
#     simulated; faster, and independent of the host's load; docs/SIMULATION.md)
#   and, after --, the bench's own options (default: --sizes-mib 4 --iters 5 --warmup 1)
# dedicated: N ranks, one per node; the PS are the first P nodes (--ps-placement first).
# colocated: N workers, one per node, and P PS, one on each of the first P nodes (--ps-placement per-node).
#   bench/smpi_exchange.sh --nodes 64 --ps 8 --gbit 25 -- --sizes-mib 16 --schemes passive,fence
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
nodes=8 ps=2 layout=dedicated gbit=25 lat_us=2 oversub=1 build="$root/build-smpi" flat=() fold=0 compute=yes
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ps) ps=$2; shift 2 ;;
    --layout) layout=$2; shift 2 ;;
    --gbit) gbit=$2; shift 2 ;;
    --lat-us) lat_us=$2; shift 2 ;;
    --oversub) oversub=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --flat) flat=(--flat); shift ;;
    --fold) fold=1; shift ;;
    --no-compute) compute=no; shift ;;
    --) shift; break ;;
    *) echo "smpi_exchange: unknown option '$1' (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
bench_args=("$@")
[ ${#bench_args[@]} -gt 0 ] || bench_args=(--sizes-mib 4 --iters 5 --warmup 1)
bin="$build/bin/drt_bench_exchange"
[ -x "$bin" ] || { echo "smpi_exchange: no $bin; build it first: SMPI_PRETEND_CC=1 cmake -S . -B build-smpi -DCMAKE_CXX_COMPILER=smpicxx -DCMAKE_C_COMPILER=smpicc -DDRT_SMPI=ON && cmake --build build-smpi (without SMPI_PRETEND_CC)" >&2; exit 2; }
command -v smpirun >/dev/null || { echo "smpi_exchange: no smpirun; apt-get install libsimgrid-dev" >&2; exit 2; }

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
speed=1e9  # flop/s: the hosts' speed and smpi/host-speed alike (simulated compute = host CPU time)
python3 "$root/scripts/smpi_platform.py" --nodes "$nodes" --gbit "$gbit" --lat-us "$lat_us" \
  --oversub "$oversub" --speed "$speed" "${flat[@]}" -o "$work/platform.xml"
case "$layout" in
  dedicated) placement=first; for ((i = 0; i < nodes; i++)); do echo "node-$i"; done >"$work/hosts" ;;
  colocated) placement=per-node
    for ((i = 0; i < nodes; i++)); do echo "node-$i"; [ "$i" -lt "$ps" ] && echo "node-$i"; done >"$work/hosts" ;;
  *) echo "smpi_exchange: --layout is dedicated or colocated, not '$layout'" >&2; exit 2 ;;
esac
ranks=$(wc -l <"$work/hosts")
echo "smpi_exchange: $nodes nodes ($layout, $ps PS, $ranks ranks), $gbit Gbit/s, $lat_us us," \
  "oversubscription $oversub$([ $fold = 1 ] && echo ", memory folded")$([ $compute = no ] && echo ", no compute")"
# smpi/test, smpi/iprobe, grow-injected-times: drtrain polls with MPI_Test/MPI_Iprobe, which SMPI
#   otherwise charges 100 us of simulated time each, growing with each failed call.
# coll-selector ompi: MPI_Win_allocate's allgather in O(N) messages, not O(N^2).
# allreduce lr: a ring allreduce (what the bench's floor assumes).
# CM02, crosstraffic 0: plain alpha-beta links (no calibration factors, no ack traffic).
# shared-malloc-blocksize: with --fold, a 16 MiB buffer is one mapping, not 16 (vm.max_map_count).
DRT_SMPI_FOLD=$fold smpirun -np "$ranks" -platform "$work/platform.xml" -hostfile "$work/hosts" \
  --cfg=smpi/test:1e-7 --cfg=smpi/iprobe:1e-7 --cfg=smpi/grow-injected-times:no \
  --cfg=smpi/coll-selector:ompi --cfg=smpi/allreduce:lr \
  --cfg=network/model:CM02 --cfg=network/crosstraffic:0 --cfg=smpi/host-speed:${speed}f \
  --cfg=smpi/shared-malloc-blocksize:$((16 << 20)) --cfg=smpi/simulate-computation:$compute \
  --log=root.thres:warning \
  "$bin" --num-ps "$ps" --ps-placement "$placement" --link-gbit "$gbit" "${bench_args[@]}"
