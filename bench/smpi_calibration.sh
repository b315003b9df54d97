#!/usr/bin/env bash
# The emulated cluster's layouts simulated on SimGrid (docs/PLANNER.md, "Calibration"): one switch
# (the bridge), each node's link at RATE Gbit/s and 10 us one-way (5 us a link: the emulated
# cluster's measured TCP round trip is 20 us), the same bench, schemes and sizes as
# bench/cluster_exchange.sh. Prints one bench JSON line per layout, as cluster_exchange.sh does;
# scripts/calibration_points.py turns them into calibration points. Needs build-smpi (docs/SIMULATION.md).
#   bench/smpi_calibration.sh [GBIT...]          default: 0.25 1
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rates=${*:-0.25 1}
sizes=${DRT_BENCH_SIZES:-4,16}
schemes=${DRT_BENCH_SCHEMES:-passive,ordered,passive-det,passive-bf16,fence}
out=${DRT_BENCH_OUT:-$(mktemp -d /tmp/drt_smpi_calib.XXXXXX)}
mkdir -p "$out"
run() {  # NAME NODES PS LAYOUT GBIT
  local start=$SECONDS
  "$root/bench/smpi_exchange.sh" --flat --nodes "$2" --ps "$3" --layout "$4" --gbit "$5" --lat-us 5 -- \
    --sizes-mib "$sizes" --schemes "$schemes" --iters 5 --warmup 1 >"$out/$1.log" 2>&1 ||
    { echo "smpi_calibration: $1 failed: see $out/$1.log" >&2; return 0; }
  echo "== $1: $((SECONDS - start)) s wall" >&2
}
for g in $rates; do
  run "dedicated-2+2-${g}g" 4 2 dedicated "$g"
  run "dedicated-4+4-${g}g" 8 4 dedicated "$g"
  run "colocated-2x2-${g}g" 2 2 colocated "$g"
  run "colocated-4x2-${g}g" 4 4 colocated "$g"
done
for f in "$out"/*.log; do echo "$(basename "$f" .log) $(grep '^{"bench"' "$f" || echo '{}')"; done
echo "logs in $out" >&2
