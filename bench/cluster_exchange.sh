#!/usr/bin/env bash
# The exchange across emulated nodes (tests/cluster/emulated_cluster.sh: network namespaces,
# tc tbf per node and direction): drt_bench_exchange's step time against the workers'
# MPI_Allreduce of the same bytes over the same links, in the same run, and against the link
# floor (the busiest node's bytes per step / link rate). Needs root; run after a build.
#
#   bench/cluster_exchange.sh [BUILD_DIR] [RATES]       e.g. bench/cluster_exchange.sh build "1gbit 10gbit"
#   (a rate of "none" leaves the links unlimited: what the exchange costs the shared CPUs alone)
#
# Layouts (one row each, per rate; DRT_BENCH_LAYOUTS="dedicated-2+2 ..." to choose):
#   dedicated 2+2   4 nodes, 1 rank each: PS on nodes 1-2, workers on nodes 3-4
#   dedicated 4+4   8 nodes, 1 rank each: PS on nodes 1-4, workers on nodes 5-8
#   co-located 2x2  2 nodes, 2 ranks each, --ps-placement per-node (a PS and a worker per node)
#   co-located 4x2  4 nodes, 2 ranks each, --ps-placement per-node
# Open MPI as configured on the machine (Debian: drtrain chooses osc/pt2pt); with DRT_BENCH_UCX=1
# also osc/ucx for the 4+4 layout at the first rate, 16 MiB only (it is slow over TCP: RESULTS.md). Every rank sets mpi_yield_when_idle: the emulated nodes share this machine's cores,
# and a rank that spins in MPI (as an allreduce or a flush does) would take the core another
# "node" needs (on a real cluster each node has its own).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rates=${2:-"1gbit 10gbit"}
bin=$build/bin/drt_bench_exchange
[ -x "$bin" ] || { echo "cluster_exchange: $bin not built (run scripts/test.sh or cmake --build first)" >&2; exit 1; }
sizes=${DRT_BENCH_SIZES:-16,64}
schemes=${DRT_BENCH_SCHEMES:-passive,passive-det,fence}
out=${DRT_BENCH_OUT:-$(mktemp -d /tmp/drt_cluster_bench.XXXXXX)}
mkdir -p "$out"

inner=$out/inner.sh
cat > "$inner" <<EOF
#!/usr/bin/env bash
# runs on node 1: NAME PPN PS PLACEMENT GBIT [OSC]
set -euo pipefail
export OMPI_MCA_mpi_yield_when_idle=1
sizes=$sizes
if [ -n "\${6:-}" ]; then export OMPI_MCA_osc=\$6; sizes=16; fi
"$root/tests/cluster/cluster_mpirun.sh" openmpi --ppn "\$2" -- "$bin" --num-ps "\$3" --ps-placement "\$4" \
  --sizes-mib \$sizes --schemes $schemes --iters 5 --warmup 1 --link-gbit "\$5" > "$out/\$1.log" 2>&1
EOF
chmod +x "$inner"

gbit_of() {  # tc rate -> Gbit/s (none: unlimited links, no link floor: the exchange's CPU-only time)
  case $1 in none) echo 0 ;; *gbit) echo "${1%gbit}" ;; *mbit) awk "BEGIN{print ${1%mbit}/1000}" ;; *) echo "unknown rate $1" >&2; exit 1 ;; esac
}

run() {  # NAME NODES PPN PS PLACEMENT RATE [OSC]
  local name=$1 nodes=$2 ppn=$3 ps=$4 placement=$5 rate=$6 osc=${7:-}
  echo "== $name: $nodes nodes x $ppn, $ps PS ($placement), $rate${osc:+, osc/$osc}" >&2
  "$root/tests/cluster/emulated_cluster.sh" --nodes "$nodes" --rate "$rate" -- \
    "$inner" "$name" "$ppn" "$ps" "$placement" "$(gbit_of "$rate")" "$osc" \
    || { echo "   failed: see $out/$name.log" >&2; return 0; }
  grep -A20 "^links at" "$out/$name.log" | grep -v '^{' >&2 || true
}

layouts=${DRT_BENCH_LAYOUTS:-"dedicated-2+2 dedicated-4+4 colocated-2x2 colocated-4x2"}
for rate in $rates; do
  for layout in $layouts; do
    case $layout in
      dedicated-2+2) run "$layout-$rate" 4 1 2 first "$rate" ;;
      dedicated-4+4) run "$layout-$rate" 8 1 4 first "$rate" ;;
      colocated-2x2) run "$layout-$rate" 2 2 2 per-node "$rate" ;;
      colocated-4x2) run "$layout-$rate" 4 2 4 per-node "$rate" ;;
      *) echo "cluster_exchange: unknown layout '$layout' in DRT_BENCH_LAYOUTS" >&2; exit 2 ;;
    esac
  done
done
first_rate=$(echo "$rates" | awk '{print $1}')
if [ "${DRT_BENCH_UCX:-0}" = 1 ]; then run "dedicated-4+4-ucx-$first_rate" 8 1 4 first "$first_rate" ucx; fi

# One JSON line per run, for RESULTS.md.
for f in "$out"/*.log; do
  echo "$(basename "$f" .log) $(grep '^{"bench"' "$f" || echo '{}')"
done
echo "logs in $out" >&2
