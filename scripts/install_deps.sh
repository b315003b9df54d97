#!/usr/bin/env bash
# Installs, with apt-get, every Debian 12 package drtrain needs to build, test and train that is
# not installed yet. Safe to run again: with nothing missing it changes nothing.
# Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev          # MPI (Open MPI 4.1), the default
  libhdf5-openmpi-dev hdf5-tools      # parallel HDF5 (checkpoints), h5ls/h5dump
  mpich libmpich-dev libhdf5-mpich-dev  # the MPICH build that CI tests too
  libboost-program-options-dev        # CLI
  libopenblas-dev                     # GEMM on CPU
  libdnnl-dev                         # oneDNN: CPU convolutions
  libgtest-dev                        # tests
  clang libclang-rt-14-dev            # libFuzzer targets (fuzz/, scripts/fuzz_check.sh)
  clang-tidy clang-format             # scripts/lint_check.sh: bug-finding checks and the format check
  zlib1g-dev                          # gzip'd IDX files
  python3 python3-h5py python3-numpy  # checkpoint tests read files with h5py
  libsimgrid-dev time                 # SimGrid SMPI: the simulated exchange (docs/SIMULATION.md); GNU time (RESULTS.md [d3])
  python3-matplotlib                  # scripts/plot_metrics.py
  iproute2 procps util-linux          # the emulated cluster: ip/tc, pgrep, unshare
  dataset-fashion-mnist               # training data under /usr/share/datasets/fashion-mnist
  python3.11-doc                      # a text corpus (Python's documentation): scripts/make_text_corpus.sh
)

# Wanted but not required: the Slurm test runs the jobs/ scripts on a private Slurm and reports
# Skipped where these cannot be installed.
optional=(slurmctld slurmd slurm-client munge libpmix-dev)

missing_of() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || echo "$p"
  done
}
mapfile -t missing < <(missing_of "${packages[@]}")
mapfile -t missing_optional < <(missing_of "${optional[@]}")
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ]; then
  echo "install_deps: all $(( ${#packages[@]} + ${#optional[@]} )) packages present"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]} ${missing_optional[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ${#missing_optional[@]} -gt 0 ]; then
  echo "install_deps: installing (optional) ${missing_optional[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${missing_optional[@]}" \
    || echo "install_deps: warning: could not install ${missing_optional[*]}; the tests that need them will be skipped"
fi
