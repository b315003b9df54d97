#!/usr/bin/env bash
# Many trials of tests/e2e/checkpoint_stress.py (background checkpoints with several PS under
# load) against the build in build/ (or $DRT_BUILD): e.g.
#   tests/e2e/checkpoint_stress.sh --trials 50 --load 2 --modes sync,async,ssp:2
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec /usr/bin/python3 "$DRT_ROOT/tests/e2e/checkpoint_stress.py" --bin "$DRT_BUILD/bin" \
  --mpiexec "mpiexec $(drt_mpiexec_flags)" --work "${TMPDIR:-/tmp}/drtrain-checkpoint-stress" "$@"
