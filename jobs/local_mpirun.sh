#!/usr/bin/env bash
# Train with drtrain on this machine through mpirun: 1 PS and the rest workers.
#   jobs/local_mpirun.sh [RANKS] [CONFIG] [extra drtrain options...]
#   jobs/local_mpirun.sh 4 jobs/configs/mlp.ini --epochs 3 --metrics mlp.jsonl
# RANKS (default 4) counts the PS too. Needs a build in build/ (scripts/test.sh or
# scripts/quickstart.sh make one).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

ranks=${1:-4}
config=${2:-jobs/configs/mlp.ini}
shift $(( $# < 2 ? $# : 2 ))

# --bind-to none: Open MPI binds each of 1-2 ranks to one core by default, which would stop a
# worker from using more BLAS threads than that. Oversubscription flags come from common.sh.
# shellcheck disable=SC2046
exec mpiexec -n "$ranks" --bind-to none $(drt_mpiexec_flags) "$DRT_BUILD/bin/drtrain" --config "$config" "$@" < /dev/null
