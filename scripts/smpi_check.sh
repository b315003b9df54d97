#!/usr/bin/env bash
# The SMPI (SimGrid) pass of scripts/test.sh: configures build-smpi/ (drt_bench_exchange alone,
# compiled with smpicxx; docs/SIMULATION.md), builds it and runs its ctest, the 8-node simulated
# exchange (smpi.exchange8). Safe to run again.
set -euo pipefail
source "$(dirname "$0")/common.sh"
build="$DRT_ROOT/build-smpi"
command -v smpicxx >/dev/null || { echo "smpi_check: no smpicxx; apt-get install libsimgrid-dev (scripts/install_deps.sh)" >&2; exit 1; }
# SMPI_PRETEND_CC for the configure step only: CMake's compiler probes then run; binaries built
# with it set would not run in the simulator.
SMPI_PRETEND_CC=1 cmake -S "$DRT_ROOT" -B "$build" -DCMAKE_CXX_COMPILER=smpicxx -DCMAKE_C_COMPILER=smpicc \
  -DDRT_SMPI=ON -DDRT_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build "$build" -j "$DRT_JOBS"
ctest --test-dir "$build" --output-on-failure
