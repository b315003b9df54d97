#!/usr/bin/env bash
# Creates (once) a virtual environment the peer benchmarks run from, and prints its python on
# stdout: a current PyTorch from PyPI (not Debian's python3-torch 1.13) with numpy and h5py (which
# torch_gpt.py reads drtrain's checkpoints and token files with), or with the argument `tf`, a
# current TensorFlow (PyPI's tensorflow-cpu) in a venv of its own. A venv that lacks a package
# gets just that one (pip keeps what is there).
#
#   PY=$(bench/peers/make_venv.sh)          # DRT_PEER_VENV=DIR to choose where (default build/peer-venv)
#   TF=$(bench/peers/make_venv.sh tf)       # DRT_PEER_VENV_TF=DIR (default build/peer-venv-tf)
#
# PyPI's Linux wheel of torch is the CUDA build: it brings the nvidia-* runtime wheels (several
# GiB) even where only its CPU path is used; the benchmarks use the CPU path (gloo for DDP).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
case "${1:-torch}" in
  torch) venv=${DRT_PEER_VENV:-$root/build/peer-venv} modules=torch,numpy,h5py packages=(torch numpy h5py) ;;
  tf) venv=${DRT_PEER_VENV_TF:-$root/build/peer-venv-tf} modules=tensorflow,numpy packages=(tensorflow-cpu numpy) ;;
  *) echo "make_venv: unknown peer '$1' (torch or tf)" >&2; exit 2 ;;
esac
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import $modules" 2>/dev/null; then
  if [ ! -x "$venv/bin/python" ]; then
    echo "make_venv: creating $venv with ${packages[*]} from PyPI (large, once)" >&2
    python3 -m venv "$venv" >&2 || { apt-get install -y python3-venv >&2 && python3 -m venv "$venv" >&2; }
    "$venv/bin/pip" install --quiet --upgrade pip >&2
  else
    echo "make_venv: adding what $venv lacks of ${packages[*]}" >&2
  fi
  "$venv/bin/pip" install --quiet "${packages[@]}" >&2
fi
echo "$venv/bin/python"
