#!/usr/bin/env bash
# Writes a synthetic data set in drtrain's HDF5 format (docs/DATA_FORMAT.md) for memory and
# throughput tests: `drtrain-data synth` with a train split of about SIZE_GIB GiB of images
# (default 3x32x32 uint8, CIFAR-sized), 10 classes and a test split of 10000. Written in pieces
# (never held in memory) through OUT.tmp; the same bytes for the same seed. Needs a built
# drtrain-data ($DRT_BUILD/bin, default build/).
#   scripts/make_synthetic_data.sh OUT.h5 [SIZE_GIB] [drtrain-data synth options]
#   scripts/make_synthetic_data.sh /scratch/synth.h5 8 --shape 3,64,64 --dtype float32 --seed 7
# SIZE_GIB defaults to 2; the options given replace the defaults (--count replaces SIZE_GIB).
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ $# -lt 1 ] || [[ $1 == --* ]]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
out=$1
shift
gib=2
if [ $# -gt 0 ] && [[ $1 != --* ]]; then
  gib=$1
  shift
fi
if ! [[ $gib =~ ^[0-9]+$ ]] || [ "$gib" -lt 1 ]; then
  echo "make_synthetic_data: SIZE_GIB must be a whole number >= 1, got '$gib'" >&2
  exit 2
fi
tool="$DRT_BUILD/bin/drtrain-data"
if [ ! -x "$tool" ]; then
  echo "make_synthetic_data: $tool is missing: build it first (cmake --build $DRT_BUILD --target drtrain-data)" >&2
  exit 1
fi

given() {  # given OPTION: prints its value when the caller passed OPTION
  local args=("${extra[@]}") i
  for ((i = 0; i < ${#args[@]}; i++)); do
    if [ "${args[$i]}" = "$1" ]; then
      echo "${args[$((i + 1))]:-}"
      return 0
    fi
  done
  return 1
}
extra=("$@")
shape=$(given --shape || echo 3,32,32)
bytes=1
[ "$(given --dtype || echo uint8)" = float32 ] && bytes=4
IFS=, read -r c h w <<< "$shape"
if ! [[ ${c:-} =~ ^[0-9]+$ && ${h:-} =~ ^[0-9]+$ && ${w:-} =~ ^[0-9]+$ ]] || [ $((c * h * w)) -eq 0 ]; then
  echo "make_synthetic_data: --shape $shape: expected C,H,W" >&2
  exit 2
fi
defaults=()
given --shape > /dev/null || defaults+=(--shape "$shape")
given --count > /dev/null || defaults+=(--count $((gib * 1024 * 1024 * 1024 / (c * h * w * bytes))))
given --classes > /dev/null || defaults+=(--classes 10)
given --test-count > /dev/null || defaults+=(--test-count 10000)
exec "$tool" synth "$out" "${defaults[@]}" "${extra[@]+"${extra[@]}"}"
