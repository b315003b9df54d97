#!/usr/bin/env bash
# Creates (once) the virtual environment the peer benchmarks run PyTorch from: a current PyTorch
# from PyPI, not Debian's python3-torch 1.13. Prints the venv's python on stdout.
#
#   PY=$(bench/peers/make_venv.sh)          # DRT_PEER_VENV=DIR to choose where (default build/peer-venv)
#
# PyPI's Linux wheel of torch is the CUDA build: it brings the nvidia-* runtime wheels (several
# GiB) even where only its CPU path is used; the benchmarks use the CPU path (gloo for DDP).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${DRT_PEER_VENV:-$root/build/peer-venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, numpy" 2>/dev/null; then
  echo "make_venv: creating $venv with PyTorch from PyPI (a few GiB, once)" >&2
  python3 -m venv "$venv" >&2 || { apt-get install -y python3-venv >&2 && python3 -m venv "$venv" >&2; }
  "$venv/bin/pip" install --quiet --upgrade pip >&2
  "$venv/bin/pip" install --quiet torch numpy >&2
fi
echo "$venv/bin/python"
