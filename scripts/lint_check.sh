#!/usr/bin/env bash
# Lint: clang-tidy (.clang-tidy: bugprone-*, performance-*, mpi-*, concurrency-*, every finding an
# error) over drtrain's .cpp files, the clang-format check (.clang-format) over the C++ sources, and
# the size check (scripts/size_check.py): no C++ function of 80 lines or more in src/ include/
# kernels/ tests/ bench/, no document (README.md, docs/*.md, bench/RESULTS.md, src/**/README.md)
# over 400 lines, except those scripts/lint_exceptions.txt lists (a list that may only shrink),
# and every relative link of the Markdown documents resolving (scripts/check_doc_links.py).
# Exits non-zero on any clang-tidy finding, any file clang-format would change, or any size finding.
#
# clang-tidy reads the compile commands of a CPU-only configure in build-tidy/ (nothing is built);
# it covers every .cpp file of that build: src/, kernels/reference.cpp, tests/, bench/. Not covered:
# the .cu kernels and src/backend/cuda/ (CUDA builds only), fuzz/ (clang builds with
# DRT_BUILD_FUZZERS=ON only; scripts/fuzz_check.sh builds them).
# The format check covers src include kernels tests bench fuzz examples (*.cpp *.hpp *.cu *.cuh).
#
# Took 287 s (265 s of CPU) with DRT_JOBS=2 from an empty build-tidy/, on 2 cores that another
# build was using too: configure about 2 s, clang-tidy over 79 files nearly all of it, the format
# check about 2 s, the size check about 1 s. Each file costs clang-tidy 1 to 6 s of CPU.
#   DRT_LINT_CHECKS=format scripts/lint_check.sh   one check only (tidy | format | size)
#   clang-format -i FILE...                        reformat what the format check lists
set -euo pipefail
source "$(dirname "$0")/common.sh"
DRT_BUILD="$DRT_ROOT/build-tidy"
checks=${DRT_LINT_CHECKS:-tidy format size}
CLANG_TIDY=${CLANG_TIDY:-clang-tidy}
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
failed=0

if [[ " $checks " == *" tidy "* ]]; then
  cmake -S "$DRT_ROOT" -B "$DRT_BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
        -DDRT_ENABLE_CUDA=OFF -DDRT_BUILD_FUZZERS=OFF >/dev/null
  mapfile -t files < <(python3 -c '
import json, sys
root, build = sys.argv[1], sys.argv[3]
seen = set()
for e in json.load(open(sys.argv[2])):
    f = e["file"]
    # drtrain'"'"'s sources, not the ones the build generates (model_presets.cpp)
    if f.startswith(root + "/") and not f.startswith(build + "/") and f.endswith(".cpp") and f not in seen:
        seen.add(f)
        print(f)
' "$DRT_ROOT" "$DRT_BUILD/compile_commands.json" "$DRT_BUILD" | sort)
  echo "lint_check: clang-tidy over ${#files[@]} files (-j $DRT_JOBS)"
  # One clang-tidy a file; its diagnostics are printed whole, and only when it fails. The
  # "N warnings generated." lines count suppressed warnings in system headers: dropped.
  if ! printf '%s\n' "${files[@]}" | xargs -P "$DRT_JOBS" -n 1 bash -c '
      out=$("$0" -p "$1" --quiet "$2" 2>&1) && exit 0
      printf "%s\n" "$out" | grep -v "^[0-9]* warnings\? generated\.$"
      exit 1' "$CLANG_TIDY" "$DRT_BUILD"; then
    echo "lint_check: clang-tidy: FAILED (fix the finding, or suppress it with // NOLINT(check): reason)" >&2
    failed=1
  else
    echo "lint_check: clang-tidy: no findings"
  fi
fi

if [[ " $checks " == *" format "* ]]; then
  mapfile -t sources < <(cd "$DRT_ROOT" && git ls-files -- \
    'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'kernels/*.cpp' 'kernels/*.hpp' 'kernels/*.cu' 'kernels/*.cuh' \
    'tests/*.cpp' 'tests/*.hpp' 'bench/*.cpp' 'bench/*.hpp' 'fuzz/*.cpp' 'fuzz/*.hpp' \
    'examples/*.cpp' 'examples/*.hpp')
  echo "lint_check: clang-format over ${#sources[@]} files"
  bad=()
  for f in "${sources[@]}"; do
    "$CLANG_FORMAT" --dry-run --Werror "$DRT_ROOT/$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "lint_check: clang-format would change ${#bad[@]} file(s); see \`clang-format --dry-run FILE\`, fix with" \
         "\`clang-format -i FILE\`:" >&2
    printf '  %s\n' "${bad[@]}" >&2
    failed=1
  else
    echo "lint_check: clang-format: all formatted"
  fi
fi

if [[ " $checks " == *" size "* ]]; then
  # Prints each function or document over its limit that is not listed, and each listed one no
  # longer over it (the list shrinks as they are fixed).
  # The map and the documents link each other: every relative link must resolve too.
  if python3 "$DRT_ROOT/scripts/size_check.py" "$DRT_ROOT" && python3 "$DRT_ROOT/scripts/check_doc_links.py"; then
    echo "lint_check: size: no function or document over its limit outside scripts/lint_exceptions.txt; doc links resolve"
  else
    echo "lint_check: size: FAILED (split what it lists; remove fixed entries from scripts/lint_exceptions.txt)" >&2
    failed=1
  fi
fi

exit "$failed"
