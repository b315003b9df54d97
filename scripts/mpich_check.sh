#!/usr/bin/env bash
# The whole test suite once more, built against MPICH (Debian's mpich, libmpich-dev and the
# MPICH build of parallel HDF5) instead of Open MPI, in build-mpich/. Run by scripts/test.sh.
# Open MPI stays the system default MPI; this build names MPICH's compilers and launcher.
# It is also CI's CPU-only configuration (-DDRT_ENABLE_CUDA=OFF): the main build in build/ is the
# CUDA one wherever nvcc is installed, so this keeps a build without CUDA from rotting. And it is
# built with UndefinedBehaviorSanitizer (-DDRT_SANITIZE=undefined, every finding fatal), so the
# whole suite -- MPI tests, end-to-end runs, the emulated cluster -- runs under UBSan too.
set -euo pipefail
source "$(dirname "$0")/common.sh"
DRT_BUILD="$DRT_ROOT/build-mpich"
cmake -S "$DRT_ROOT" -B "$DRT_BUILD" -DCMAKE_BUILD_TYPE=Release -DDRT_ENABLE_CUDA=OFF -DDRT_BUILD_BENCH=OFF \
      -DDRT_WARNINGS_AS_ERRORS=ON -DDRT_MPIEXEC_FLAGS= -DDRT_SANITIZE=undefined \
      -DMPI_C_COMPILER=/usr/bin/mpicc.mpich -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich \
      -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich -DHDF5_C_COMPILER_EXECUTABLE=/usr/bin/h5pcc.mpich
cmake --build "$DRT_BUILD" -j "$DRT_JOBS"
if ldd "$DRT_BUILD/bin/drtrain" | grep libmpi.so >/dev/null; then  # not -q: see test_slurm_jobs.sh
  echo "mpich_check: build-mpich/bin/drtrain links Open MPI's libmpi: the MPICH configuration did not take" >&2
  exit 1
fi
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$DRT_BUILD" --output-on-failure -j "$DRT_JOBS"
echo "MPICH check (under UBSan): passed"
