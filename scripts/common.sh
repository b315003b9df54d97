# Sourced by the scripts: repository root, build directory and mpiexec flags for this machine.
DRT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRT_BUILD=${DRT_BUILD:-$DRT_ROOT/build}
DRT_JOBS=${DRT_JOBS:-$(nproc)}

# Flags mpiexec needs here: Open MPI refuses more ranks than cores without --oversubscribe
# and refuses root without --allow-run-as-root. MPICH needs neither. The launcher asked is the
# argument (e.g. /usr/bin/mpiexec.mpich), `mpiexec` by default.
drt_mpiexec_flags() {
  local version
  version=$("${1:-mpiexec}" --version 2>&1 || true)
  if [[ $version == *"Open MPI"* || $version == *OpenRTE* ]]; then
    local flags="--oversubscribe"
    [ "$(id -u)" -eq 0 ] && flags="$flags --allow-run-as-root"
    echo "$flags"
  fi
}

# Configures (if needed) and builds drtrain into $DRT_BUILD. Extra arguments go to cmake.
drt_build() {
  local flags
  flags=$(drt_mpiexec_flags)
  cmake -S "$DRT_ROOT" -B "$DRT_BUILD" -DCMAKE_BUILD_TYPE=Release \
        "-DDRT_MPIEXEC_FLAGS=${flags// /;}" "$@"
  cmake --build "$DRT_BUILD" -j "$DRT_JOBS"
}
