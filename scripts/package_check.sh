#!/usr/bin/env bash
# The installed package end to end: from a configured and built drtrain build directory (the
# argument, default $DRT_BUILD), `cmake --install` into a temporary prefix; checks that the
# installed CMake files name nothing in the source or build tree and that the installed drtrain
# finds its libraries; configures examples/custom_model against the prefix (-DCMAKE_PREFIX_PATH,
# a fresh build directory, the build's C++ compiler and generator) and builds it; checks that it
# loads the MPI libraries the installed drtrain loads; runs it under the build's mpiexec with 3
# ranks (1 PS + 2 workers) for 3 steps on synthetic data: it must exit 0 and report the 3 steps
# and a test accuracy. The ctest test package.example runs this (tests/CMakeLists.txt) in the
# Open MPI build and in the MPICH one (scripts/mpich_check.sh), so the package config is checked
# against both MPIs. About 6 s on 2 cores. The temporary directory is removed on success and kept
# (its path printed) on failure.
#   scripts/package_check.sh build-mpich
#   DRT_MPIEXEC=/usr/bin/mpiexec.mpich scripts/package_check.sh   another launcher than the build's
set -euo pipefail
source "$(dirname "$0")/common.sh"
build=$(cd "${1:-$DRT_BUILD}" && pwd)
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "package_check: $build has no CMakeCache.txt: configure and build drtrain there first" >&2
  exit 1
fi
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/drt-package-check.XXXXXX")
trap 'rc=$?; if [ $rc -eq 0 ]; then rm -rf "$work"; else echo "package_check: FAILED (exit $rc); files kept in $work" >&2; fi' EXIT
prefix="$work/prefix"

echo "package_check: cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
config_dir=$(dirname "$(find "$prefix" -name drtrainConfig.cmake -print -quit)")
if [ ! -f "$config_dir/drtrainTargets.cmake" ] || [ ! -f "$prefix/include/drtrain/config.hpp" ]; then
  echo "package_check: the install lacks drtrainTargets.cmake or include/drtrain/config.hpp" >&2
  exit 1
fi
if grep -l -F -e "$DRT_ROOT/" -e "$build/" "$config_dir"/*.cmake; then
  echo "package_check: the installed CMake files above name the source or build tree" >&2
  exit 1
fi
if ldd "$prefix/bin/drtrain" | grep "not found"; then
  echo "package_check: the installed bin/drtrain cannot find the libraries above" >&2
  exit 1
fi

echo "package_check: building examples/custom_model against $prefix"
cmake -S "$DRT_ROOT/examples/custom_model" -B "$work/build" -G "$(cache CMAKE_GENERATOR)" \
      -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_COMPILER=$(cache CMAKE_CXX_COMPILER)" \
      "-DCMAKE_PREFIX_PATH=$prefix" > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
grep "^-- drtrain " "$work/configure.log"
cmake --build "$work/build" -j "$DRT_JOBS"

# The example must load the MPI libraries the installed drtrain loads, and no others.
mpi_libs() { ldd "$1" | awk '{print $1}' | grep -E '^lib(p?mpi|mpich|open-(pal|rte))' | sort -u | tr '\n' ' '; }
if [ "$(mpi_libs "$work/build/custom_model")" != "$(mpi_libs "$prefix/bin/drtrain")" ]; then
  echo "package_check: custom_model loads the MPI libraries $(mpi_libs "$work/build/custom_model")but the" \
       "installed drtrain $(mpi_libs "$prefix/bin/drtrain")" >&2
  exit 1
fi

mpiexec=${DRT_MPIEXEC:-$(cache MPIEXEC_EXECUTABLE)}
read -r -a flags <<< "$(drt_mpiexec_flags "$mpiexec")"
steps=3
cmd=("$mpiexec" -n 3 "${flags[@]}" "$work/build/custom_model" --channels 8 --blocks 2 --num-ps 1 --device cpu
     --dataset synthetic --synthetic-train 256 --synthetic-test 128 --batch-size 64 --max-steps "$steps"
     --log-every 1 --hang-timeout 60)
echo "package_check: ${cmd[*]}"
status=0
"${cmd[@]}" > "$work/run.log" 2>&1 || status=$?
cat "$work/run.log"
if [ "$status" -ne 0 ]; then
  echo "package_check: custom_model exited with status $status" >&2
  exit 1
fi
if ! grep -Eq "^custom_model: trained $steps steps, final test accuracy [0-9]+\.[0-9]+ " "$work/run.log"; then
  echo "package_check: custom_model did not report $steps trained steps and a test accuracy" >&2
  exit 1
fi
echo "package_check: passed"
