#!/usr/bin/env bash
# Many trials of tests/e2e/chaos.py (kill -9, SIGTERM or SIGUSR1 to a random rank at a random
# moment, in sync, backup, ssp and async, then --resume until done) against build/ (or $DRT_BUILD):
#   tests/e2e/chaos.sh --trials 40 [--seed N] [--modes async,ssp:2]
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec /usr/bin/python3 "$DRT_ROOT/tests/e2e/chaos.py" --bin "$DRT_BUILD/bin" \
  --mpiexec "mpiexec $(drt_mpiexec_flags)" --work "${TMPDIR:-/tmp}/drtrain-chaos" "$@"
