#!/usr/bin/env bash
# Checkpoint cost: write and read bandwidth (from drtrain's own log lines) and what saves do to
# the step time, for the MLP, the CNN and a large MLP, with 1 PS + 2 workers and 2 PS + 2
# workers. Each case runs three times, one after the other: without checkpoints, with
# --checkpoint-async false (the serve loop writes; training waits) and with background saves
# (the default), each with one metrics record per step (--log-every 1).
#   bench/checkpoint_bench.sh [--quick]     (after scripts/test.sh has built build/)
# --quick: only the large MLP with 1 PS + 2 workers (the issue's criterion: --checkpoint-every 5).
# Step time = the slowest worker's time for that step (step_ms.max of the metrics record),
# steps 6 onwards; "after a save" = the step that follows a checkpoint's step.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
quick=0
[ "${1:-}" = --quick ] && quick=1
work=$(mktemp -d /tmp/drt_ckpt_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2046
mpirun() { mpiexec --bind-to none $(drt_mpiexec_flags) "$@" < /dev/null; }

steps_summary() {  # label, metrics file, checkpoint interval (0: none) -> one line of step-time figures
  /usr/bin/python3 - "$@" <<'PY'
import json, statistics, sys
label, path, every = sys.argv[1], sys.argv[2], int(sys.argv[3])
ms = {}
for line in open(path):
    r = json.loads(line)
    if "step_ms" in r:
        ms[r["step"]] = r["step_ms"]["max"]
steady = [v for s, v in ms.items() if s > 5]
steady.sort()
p90 = steady[int(0.9 * (len(steady) - 1))]
text = (f"{label:<28} step ms: median {statistics.median(steady):8.2f}  mean {statistics.mean(steady):8.2f}  "
        f"p90 {p90:8.2f}  max {max(steady):8.2f}")
if every:
    after = [ms[s + 1] for s in ms if s % every == 0 and s + 1 in ms and s > 5]
    if after:
        text += f"  after a save: median {statistics.median(after):8.2f}"
print(text)
PY
}

models=(mlp cnn mlp:784-4096-4096-4096-10)
layouts=(1 2)
[ "$quick" = 1 ] && models=(mlp:784-4096-4096-4096-10) && layouts=(1)
for model in "${models[@]}"; do
  for ps in "${layouts[@]}"; do
    n=$((ps + 2)); name="${model//[:]/_}-$ps"; steps=60; every=10
    [ "$model" = cnn ] && steps=40
    [ "$model" = mlp:784-4096-4096-4096-10 ] && every=5
    common=(--num-ps "$ps" --model "$model" --dataset synthetic --max-steps "$steps" --log-every 1 --eval false)
    echo "== $model, $ps PS + 2 workers, $steps steps, checkpoints every $every: drtrain ${common[*]}"
    mpirun -n "$n" "$DRT_BUILD/bin/drtrain" "${common[@]}" --metrics "$work/$name-none.jsonl" > /dev/null
    steps_summary "no checkpoints" "$work/$name-none.jsonl" 0
    for async in false true; do
      dir="$work/$name-$async"
      mpirun -n "$n" "$DRT_BUILD/bin/drtrain" "${common[@]}" --checkpoint-dir "$dir" --checkpoint-every "$every" \
        --keep 2 --checkpoint-async "$async" --metrics "$dir.jsonl" > "$dir.log" 2>&1
      steps_summary "--checkpoint-async $async" "$dir.jsonl" "$every"
      grep -E "checkpoint .*iB" "$dir.log" | tail -1 | sed 's/^/    last save: /'
      grep -E "skipped" "$dir.log" | sed 's/^/    /' || true
    done
    mpirun -n "$n" "$DRT_BUILD/bin/drtrain" "${common[@]}" --checkpoint-dir "$work/$name-true" --resume 2>&1 \
      | grep -E "info\] read " | sed 's/^/    /' || true
  done
done
