#!/usr/bin/env bash
# The code that parses untrusted files (IDX datasets, HDF5 data sets and .npy files, HDF5
# checkpoints) under AddressSanitizer and UndefinedBehaviorSanitizer: a separate build in
# build-asan/, then the data unit tests (IDX; HDF5 data sets: good, broken and corrupt files),
# drtrain-data on files h5py and numpy wrote, and the checkpoint file tests (good, broken and
# crashed files); then ThreadSanitizer over the data tests, whose batch loader runs a producer
# thread (build-tsan/, about a minute). Run by scripts/test.sh.
# (The whole suite runs under UndefinedBehaviorSanitizer in the MPICH pass, scripts/mpich_check.sh.)
# Not under TSan: the background checkpoint writer's test (tests/unit/test_snapshot_writer.cpp)
# crashes at start under TSan before any test runs, as does any binary here that links Open MPI's
# libraries, even without MPI_Init.
# (The worker's exchange thread, --overlap, is not under TSan yet: built with -fsanitize=thread,
# the MPI tests die of SIGSEGV under both Open MPI 4.1 and MPICH 4.0, with --overlap and without,
# and Open MPI adds lock-order reports inside its TCP transport; cause not investigated.)
set -euo pipefail
source "$(dirname "$0")/common.sh"
DRT_BUILD="$DRT_ROOT/build-asan"
flags=$(drt_mpiexec_flags)
cmake -S "$DRT_ROOT" -B "$DRT_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDRT_SANITIZE=address,undefined \
      -DDRT_ENABLE_CUDA=OFF -DDRT_BUILD_BENCH=OFF "-DDRT_MPIEXEC_FLAGS=${flags// /;}"
cmake --build "$DRT_BUILD" -j "$DRT_JOBS" --target drtrain drtrain-ckpt drtrain-data test_data test_hdf5_source
# MPI libraries keep memory until exit by design: leak reports would be theirs, not drtrain's.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$DRT_BUILD/tests/test_data"
"$DRT_BUILD/tests/test_hdf5_source"
for case in fixture tool; do
  /usr/bin/python3 "$DRT_ROOT/tests/e2e/data_files.py" --bin "$DRT_BUILD/bin" --work "$DRT_BUILD/data-files" "$case"
done
work="$DRT_BUILD/checkpoint-files"
for case in fixture bad crash tool; do
  /usr/bin/python3 "$DRT_ROOT/tests/e2e/checkpoint_files.py" --bin "$DRT_BUILD/bin" \
    --mpiexec "mpiexec $flags" --work "$work" "$case"
done

DRT_BUILD="$DRT_ROOT/build-tsan"
cmake -S "$DRT_ROOT" -B "$DRT_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDRT_SANITIZE=thread \
      -DDRT_ENABLE_CUDA=OFF -DDRT_BUILD_BENCH=OFF "-DDRT_MPIEXEC_FLAGS=${flags// /;}"
cmake --build "$DRT_BUILD" -j "$DRT_JOBS" --target test_data
TSAN_OPTIONS=halt_on_error=1 "$DRT_BUILD/tests/test_data"
echo "sanitizer check: passed"
