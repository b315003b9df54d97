#!/usr/bin/env bash
# Training from an HDF5 data set larger than the workers may hold: memory and data wait.
# Writes (once) a synthetic set of SIZE_GIB GiB (scripts/make_synthetic_data.sh: 3x32x32 uint8,
# 10 classes, 32 KiB chunks), measures the reader alone (drtrain-data bench: random batches of
# 64, one thread, warm page cache), then trains 1 PS + 2 workers from it (--dataset hdf5, global
# batch 128, --augment crop:4,flip) and reports from drtrain's summary each worker's peak
# resident memory against the set's size, the largest share of its time a worker waited for
# data, and samples/s, next to the reader's figures. Issue 13's goals: resident memory < 25% of
# the set, data wait < 5% of the step time.
#   bench/data_bench.sh [--gib G] [--model M] [--steps S] [--work DIR]   (defaults 2, resnet20, 200, /tmp/drt_data_bench)
# The set is kept in --work for the next run (delete it to regenerate).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
gib=2 model=resnet20 steps=200 work=/tmp/drt_data_bench
while [ $# -gt 0 ]; do
  case "$1" in
    --gib) gib=$2; shift ;;
    --model) model=$2; shift ;;
    --steps) steps=$2; shift ;;
    --work) work=$2; shift ;;
    *) echo "usage: $0 [--gib G] [--model M] [--steps S] [--work DIR]" >&2; exit 2 ;;
  esac
  shift
done
bin="$DRT_BUILD/bin"
mkdir -p "$work"
set_file="$work/synth-${gib}gib.h5"
[ -f "$set_file" ] || scripts/make_synthetic_data.sh "$set_file" "$gib" >&2
set_bytes=$(stat -c %s "$set_file")
echo "data set: $set_file, $(( set_bytes >> 20 )) MiB on disk"
"$bin/drtrain-data" info "$set_file" | sed -n '1,4p'

echo "--- the reader alone: $bin/drtrain-data bench $set_file --batch 64 --seconds 10"
"$bin/drtrain-data" bench "$set_file" --batch 64 --seconds 10

echo "--- training: 1 PS + 2 workers, $model, batch 128, $steps steps"
# shellcheck disable=SC2046
mpiexec --bind-to none $(drt_mpiexec_flags) -n 3 "$bin/drtrain" --num-ps 1 --dataset hdf5 --data-file "$set_file" \
  --model "$model" --batch-size 128 --max-steps "$steps" --eval false --augment crop:4,flip --log-every 50 \
  --metrics "$work/train.jsonl" < /dev/null 2>&1 | grep -v "rank [0-9]* info" | grep -E "^data |samples/s|peak resident"
/usr/bin/python3 - "$work/train.jsonl" "$set_bytes" <<'PY'
import json, sys
path, set_bytes = sys.argv[1], int(sys.argv[2])
records = [json.loads(l) for l in open(path)]
summary = [r for r in records if r.get("summary")][-1]
rss = summary["worker_peak_rss_mib"]
print(f"worker peak RSS {rss:.1f} MiB = {100.0 * rss * 2**20 / set_bytes:.1f}% of the set "
      f"({set_bytes / 2**30:.2f} GiB); data wait {100.0 * summary['data_wait_fraction']:.2f}% of the time; "
      f"{summary['samples_per_s']:.0f} samples/s ({summary['samples_per_s'] / 2:.0f} per worker)")
PY
