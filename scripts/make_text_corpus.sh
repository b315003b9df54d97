#!/usr/bin/env bash
# A real text corpus without a download: Python's documentation as the Debian package
# python3.11-doc installs it (/usr/share/doc/python3.11/html/_sources/, the reStructuredText
# sources of docs.python.org: 497 files, 11,048,275 bytes in 3.11.2-6+deb12u9), converted into a
# byte-level token data set (docs/DATA_FORMAT.md, "Token streams"; vocabulary 256, a 0 byte
# before each file, files in sorted order) with the last 5% of every file held out as /test.
# Deterministic: the same package version gives the same tokens. Prints the counts and verifies.
#   scripts/make_text_corpus.sh [OUT.h5]     default: build/data/pydoc.h5
set -euo pipefail
source "$(dirname "$0")/common.sh"
out=${1:-$DRT_BUILD/data/pydoc.h5}
src=/usr/share/doc/python3.11/html/_sources
if [ ! -d "$src" ]; then
  echo "make_text_corpus: $src is missing: install the Debian package python3.11-doc (scripts/install_deps.sh)" >&2
  exit 1
fi
data="$DRT_BUILD/bin/drtrain-data"
[ -x "$data" ] || cmake --build "$DRT_BUILD" -j "$DRT_JOBS" --target drtrain-data
mkdir -p "$(dirname "$out")"
"$data" convert --text "$src" --test-fraction 0.05 "$out"
"$data" verify "$out"
