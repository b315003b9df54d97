#!/usr/bin/env bash
# The README's first command: on a fresh Debian 12 machine (as root) installs what is missing
# (including the dataset-fashion-mnist package), builds drtrain into build/, and trains the MLP
# recipe (jobs/configs/mlp.ini, 10 epochs) on Fashion-MNIST with 1 parameter server and 3
# workers, printing the test accuracy after every epoch and a JSON summary at the end.
# A few minutes on 2 cores. Extra arguments go to drtrain (e.g. --epochs 2).
set -euo pipefail
source "$(dirname "$0")/common.sh"

"$DRT_ROOT/scripts/install_deps.sh"
drt_build
echo
echo "== training: mpirun -n 4 build/bin/drtrain --config jobs/configs/mlp.ini $*"
"$DRT_ROOT/jobs/local_mpirun.sh" 4 "$DRT_ROOT/jobs/configs/mlp.ini" "$@"
