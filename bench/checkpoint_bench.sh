#!/usr/bin/env bash
# Checkpoint cost: write and read bandwidth (from drtrain's own log lines) and what saves do to
# the step time, for the MLP, the CNN and a large MLP, with 1 PS + 2 workers and 2 PS + 2
# workers. Each case runs three times, one after the other: without checkpoints, with
# --checkpoint-async false (the serve loop writes; training waits) and with background saves
# (the default), each with one metrics record per step (--log-every 1).
#   bench/checkpoint_bench.sh [--quick] [--repeats R]     (after scripts/test.sh has built build/)
# --quick: only the large MLP with 1 PS + 2 workers (the issue's criterion: --checkpoint-every 5).
# --repeats R: the three runs of each case R times, interleaved, then each mode's median of the
# runs' medians and mean of their means, and the ratios to the runs without checkpoints.
# Step time = the slowest worker's time for that step (step_ms.max of the metrics record),
# steps 6 onwards; "after a save" = the step that follows a checkpoint's step.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
quick=0 repeats=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --repeats) repeats=$2; shift ;;
    *) echo "usage: $0 [--quick] [--repeats R]" >&2; exit 2 ;;
  esac
  shift
done
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
with open(path + ".summary", "w") as out:
    out.write(f"{statistics.median(steady)} {statistics.mean(steady)}\n")
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
    for r in $(seq "$repeats"); do
      mpirun -n "$n" "$DRT_BUILD/bin/drtrain" "${common[@]}" --metrics "$work/$name-none-$r.jsonl" > /dev/null
      steps_summary "no checkpoints" "$work/$name-none-$r.jsonl" 0
      for async in false true; do
        dir="$work/$name-$async"
        rm -rf "$dir"
        mpirun -n "$n" "$DRT_BUILD/bin/drtrain" "${common[@]}" --checkpoint-dir "$dir" --checkpoint-every "$every" \
          --keep 2 --checkpoint-async "$async" --metrics "$work/$name-$async-$r.jsonl" > "$dir.log" 2>&1
        steps_summary "--checkpoint-async $async" "$work/$name-$async-$r.jsonl" "$every"
        grep -E "checkpoint .*iB" "$dir.log" | tail -1 | sed 's/^/    last save: /'
        echo "    saves in the background: $(grep -c "in the background (" "$dir.log" || true)"
        grep -E "skipped in all" "$dir.log" | sed 's/^/    /' || true
      done
    done
    if [ "$repeats" -gt 1 ]; then
      /usr/bin/python3 - "$work" "$name" <<'PY'
import glob, statistics, sys
work, name = sys.argv[1], sys.argv[2]
figures = {}
for mode in ("none", "false", "true"):
    runs = [list(map(float, open(f).read().split())) for f in sorted(glob.glob(f"{work}/{name}-{mode}-*.jsonl.summary"))]
    figures[mode] = (statistics.median(r[0] for r in runs), statistics.mean(r[1] for r in runs))
base = figures["none"]
for mode, label in (("none", "no checkpoints"), ("false", "--checkpoint-async false"), ("true", "--checkpoint-async true")):
    med, mean = figures[mode]
    print(f"  over the repeats: {label:<26} median {med:8.2f} ms ({med / base[0]:.3f}x)  mean {mean:8.2f} ms "
          f"({mean / base[1]:.3f}x)")
PY
    fi
    mpirun -n "$n" "$DRT_BUILD/bin/drtrain" "${common[@]}" --checkpoint-dir "$work/$name-true" --resume 2>&1 \
      | grep -E "info\] read " | sed 's/^/    /' || true
  done
done
