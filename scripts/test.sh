#!/usr/bin/env bash
# The README's test command: on a fresh Debian 12 machine (as root) installs what is missing,
# configures, builds into build/ and runs the whole test suite (unit, MPI, end-to-end; GPU tests
# report Skipped without a GPU) against Open MPI, in the CUDA configuration when nvcc is
# installed; then the same suite in the CPU-only configuration (-DDRT_ENABLE_CUDA=OFF) against
# MPICH (scripts/mpich_check.sh, in build-mpich/), so neither configuration rots; then the
# sanitizer pass (scripts/sanitizer_check.sh, in build-asan/); then 20 s of each libFuzzer
# target (scripts/fuzz_check.sh, clang, in build-fuzz/); then drt_bench_exchange on 8 simulated
# nodes (scripts/smpi_check.sh, SimGrid SMPI, in build-smpi/). First of all, the lint check
# (scripts/lint_check.sh: clang-tidy and clang-format, a few minutes). Exits non-zero on any
# failure; safe to run again.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# Each phase's wall time, printed as it ends and again at the end (the suite's budget is 50 min).
timings=()
phase() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  local took=$((SECONDS - start))
  timings+=("$(printf '%-10s %5d s' "$name" "$took")")
  echo "test.sh: $name took $took s"
}
phase deps "$DRT_ROOT/scripts/install_deps.sh"
phase lint "$DRT_ROOT/scripts/lint_check.sh"
phase build drt_build -DDRT_WARNINGS_AS_ERRORS=ON
phase ctest ctest --test-dir "$DRT_BUILD" --output-on-failure -j "$DRT_JOBS"
phase mpich "$DRT_ROOT/scripts/mpich_check.sh"
phase sanitizer "$DRT_ROOT/scripts/sanitizer_check.sh"
phase fuzz "$DRT_ROOT/scripts/fuzz_check.sh"
# SimGrid SMPI: drt_bench_exchange on 8 simulated nodes (scripts/smpi_check.sh, in build-smpi/).
phase smpi "$DRT_ROOT/scripts/smpi_check.sh"
printf 'test.sh: %s\n' "${timings[@]}" "$(printf '%-10s %5d s' total "$SECONDS")"
