#!/usr/bin/env bash
# One worker next to its PS on one node: samples/s by worker threads and GEMM library,
# interleaved, so that the layout question "1 thread or all cores?" is answered by measurement.
#
#   bench/worker_threads.sh [REPEATS] [MODEL]      # default 4 repeats, mlp; after scripts/test.sh
#
# Each run: mpiexec -n 2 drtrain --num-ps 1 (1 PS + 1 worker), synthetic data, global batch 128,
# 420 steps; the figure is the mean of the progress records' samples/s over steps 141-420 (the
# first 140 are warm-up), with the last record's per-step phases (compute, push, PS wait).
# Configurations: 1 and 2 threads with oneDNN's GEMM (the default), 2 threads with
# GOMP_SPINCOUNT=10000 (libgomp's spin-wait shortened), 2 and 1 threads with --cpu-gemm openblas.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPEATS=${1:-4}
MODEL=${2:-mlp}
DRTRAIN="$ROOT/build/bin/drtrain"
[[ -x "$DRTRAIN" ]] || { echo "worker_threads.sh: $DRTRAIN not found; run scripts/test.sh first" >&2; exit 1; }
MPI=(mpiexec --oversubscribe --bind-to none)
[[ $EUID -eq 0 ]] && MPI+=(--allow-run-as-root)
METRICS=$(mktemp /tmp/drt_worker_threads.XXXXXX.jsonl)
trap 'rm -f "$METRICS"' EXIT

run() {  # label ENV=VALUE -- drtrain args
  local label=$1 env=$2
  shift 3
  "${MPI[@]}" -x "$env" -n 2 "$DRTRAIN" --num-ps 1 --model "$MODEL" --dataset synthetic --batch-size 128 \
    --max-steps 420 --eval false --log-every 140 --metrics "$METRICS" "$@" >/dev/null 2>&1 ||
    { echo "worker_threads.sh: $label failed" >&2; exit 1; }
  grep '"ms_per_step"' "$METRICS" | tail -n 2 | python3 -c "
import json, sys
rs = [json.loads(l) for l in sys.stdin]
phases = ', '.join(f'{k} {v:.2f}' for k, v in rs[-1]['ms_per_step'].items() if v)
print(f'{sys.argv[1]:34} {sum(r[\"samples_per_s\"] for r in rs) / len(rs):8.0f} samples/s   ms/step: {phases}')" "$label"
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), model $MODEL"
for ((r = 1; r <= REPEATS; r++)); do
  run "1 thread, oneDNN GEMM" X=1 -- --threads 1
  run "2 threads, oneDNN GEMM" X=1 -- --threads 2
  run "2 threads, oneDNN, GOMP_SPINCOUNT=10000" GOMP_SPINCOUNT=10000 -- --threads 2
  run "2 threads, OpenBLAS GEMM" X=1 -- --threads 2 --cpu-gemm openblas
  run "1 thread, OpenBLAS GEMM" X=1 -- --threads 1 --cpu-gemm openblas
done
