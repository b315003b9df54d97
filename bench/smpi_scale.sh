#!/usr/bin/env bash
# The exchange at scale on SimGrid (docs/PLANNER.md, "Scale"): drt_bench_exchange on fat trees of
# NODES hosts at GBIT Gbit/s (2 us a link), for a gradient of MIB MiB, in two layouts per size:
# dedicated (NODES/8 PS nodes, the rest workers) and co-located (a worker on every node, a PS on
# every node), passive and fence and the workers' ring allreduce; each run's wall time and peak
# memory (scripts/peak_mem.py: proportional set size, which counts folded memory once) beside its
# JSON line. Needs build-smpi (docs/SIMULATION.md).
#   bench/smpi_scale.sh [MIB] [GBIT] [NODES...]         default: 2 25 8 16 32 64
#   DRT_BENCH_SCHEMES=fence for large gradients (SMPI's passive is not faithful and slow to simulate)
#   DRT_BENCH_LAYOUTS="dedicated colocated" (the default), DRT_BENCH_FLAT=1 (one switch),
#   DRT_BENCH_FOLD=1 (memory folding: 128+ nodes; the bench's exactness check is skipped),
#   DRT_BENCH_NO_COMPUTE=1 (the ranks' CPU time not simulated: 256 nodes in 1 minute, not 7-14)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mib=${1:-2}
gbit=${2:-25}
shift $(($# < 2 ? $# : 2))
nodes_list=${*:-8 16 32 64}
out=${DRT_BENCH_OUT:-$(mktemp -d /tmp/drt_smpi_scale.XXXXXX)}
mkdir -p "$out"
extra=()
[ "${DRT_BENCH_FLAT:-0}" = 1 ] && extra+=(--flat)
[ "${DRT_BENCH_FOLD:-0}" = 1 ] && extra+=(--fold)
[ "${DRT_BENCH_NO_COMPUTE:-0}" = 1 ] && extra+=(--no-compute)
run() {  # NAME NODES PS LAYOUT
  python3 "$root/scripts/peak_mem.py" "$out/$1.time" -- \
    "$root/bench/smpi_exchange.sh" --nodes "$2" --ps "$3" --layout "$4" --gbit "$gbit" --lat-us 2 "${extra[@]}" -- \
    --sizes-mib "$mib" --schemes "${DRT_BENCH_SCHEMES:-passive,fence}" --iters 3 --warmup 1 >"$out/$1.log" 2>&1 ||
    { echo "smpi_scale: $1 failed: see $out/$1.log" >&2; return 0; }
  echo "== $1: $(cat "$out/$1.time")" >&2
}
for n in $nodes_list; do
  for layout in ${DRT_BENCH_LAYOUTS:-dedicated colocated}; do
    case "$layout" in
      dedicated) run "dedicated-$n-${mib}mib-${gbit}g" "$n" $((n / 8)) dedicated ;;
      colocated) run "colocated-$n-${mib}mib-${gbit}g" "$n" "$n" colocated ;;
      *) echo "smpi_scale: DRT_BENCH_LAYOUTS holds dedicated and colocated, not '$layout'" >&2; exit 2 ;;
    esac
  done
done
for f in "$out"/*.log; do
  echo "$(basename "$f" .log) $(cat "${f%.log}.time" 2>/dev/null | tail -1) $(grep '^{"bench"' "$f" || echo '{}')"
done
echo "logs in $out" >&2
