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

# Stopping: SIGTERM or SIGINT (Ctrl-C) to this script is passed to mpiexec as SIGUSR1, which Open
# MPI's mpiexec forwards to every rank (SIGTERM or SIGINT to mpiexec itself kills the job's ranks'
# launcher and it exits 1 even when the ranks saved and exited 75). SIGUSR1 is one of drtrain's
# default --stop-signals: the ranks stop at the same step, the PS save, every rank exits 75 and so
# does this script (keep USR1 in --stop-signals if you set it). mpiexec runs in its own session
# (setsid), so a Ctrl-C at the terminal reaches only this script, not mpiexec and the ranks directly.
# --bind-to none: Open MPI binds each of 1-2 ranks to one core by default, which would stop a
# worker from using more BLAS threads than that. Oversubscription flags come from common.sh.
# shellcheck disable=SC2046
setsid mpiexec -n "$ranks" --bind-to none $(drt_mpiexec_flags) "$DRT_BUILD/bin/drtrain" --config "$config" "$@" < /dev/null &
launcher=$!
trap 'kill -USR1 "$launcher" 2>/dev/null || true' TERM INT
# wait returns early when a trapped signal arrives: wait again until mpiexec has ended, then once
# more for its exit status (bash keeps it).
while kill -0 "$launcher" 2>/dev/null; do wait "$launcher" || true; done
status=0
wait "$launcher" || status=$?
exit "$status"
