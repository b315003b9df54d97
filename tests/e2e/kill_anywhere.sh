#!/usr/bin/env bash
# Kill anywhere, lose nothing, for longer than CI does: TRIALS (default 20) trials of
# checkpoint_files.py's "kill" case: kill -9 of a random rank at random moments of a
# --deterministic job with a checkpoint every 7 steps, --resume until a run completes, and the
# final checkpoint compared bitwise with an uninterrupted run's.
#   tests/e2e/kill_anywhere.sh [BUILD_DIR]          (default build/; TRIALS=100 SEED=N to vary)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/scripts/common.sh"
build=${1:-$root/build}
work=$(mktemp -d /tmp/drt-kill-anywhere.XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$root/tests/e2e/checkpoint_files.py" --bin "$build/bin" \
  --mpiexec "mpiexec $(drt_mpiexec_flags)" --work "$work" --trials "${TRIALS:-20}" ${SEED:+--seed "$SEED"} kill
