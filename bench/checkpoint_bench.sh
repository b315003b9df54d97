#!/usr/bin/env bash
# Checkpoint cost: write and read bandwidth (from drtrain's own log lines) and the step-time
# hiccup a save causes (from --metrics with one record per step), for the MLP, the CNN and a
# large MLP, with 1 PS + 2 workers and 2 PS + 2 workers.
#   bench/checkpoint_bench.sh            (after scripts/test.sh has built build/)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
work=$(mktemp -d /tmp/drt_ckpt_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2046
mpirun() { mpiexec --bind-to none $(drt_mpiexec_flags) "$@" < /dev/null; }

hiccup() {  # metrics file, checkpoint interval -> step time: median vs after a save
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"ms_per_step"' in l]
every = int(sys.argv[2])
ms = {r["step"]: sum(r["ms_per_step"].values()) for r in rows}
after = [ms[s + 1] for s in ms if s % every == 0 and s + 1 in ms]
normal = [v for s, v in ms.items() if s % every not in (0, 1) and s > 5]
print(f"step time median {statistics.median(normal):.2f} ms, first step after a save median "
      f"{statistics.median(after):.2f} ms (max {max(after):.2f}): hiccup {statistics.median(after) - statistics.median(normal):.2f} ms")
PY
}

for model in mlp cnn mlp:784-4096-4096-4096-10; do
  for ps in 1 2; do
    n=$((ps + 2)); dir="$work/${model//[:]/_}-$ps"; steps=60; every=10
    [ "$model" = cnn ] && steps=40
    echo "== $model, $ps PS + 2 workers: drtrain --max-steps $steps --checkpoint-every $every --log-every 1"
    mpirun -n "$n" "$DRT_BUILD/bin/drtrain" --num-ps "$ps" --model "$model" --dataset synthetic --max-steps "$steps" \
      --checkpoint-dir "$dir" --checkpoint-every "$every" --keep 2 --log-every 1 --eval false \
      --metrics "$dir.jsonl" 2>&1 | grep -E "checkpoint .*MiB" | tail -2
    hiccup "$dir.jsonl" "$every"
    mpirun -n "$n" "$DRT_BUILD/bin/drtrain" --num-ps "$ps" --model "$model" --dataset synthetic --max-steps "$steps" \
      --checkpoint-dir "$dir" --resume --eval false 2>&1 | grep -E "info\] read " || true
  done
done
