#!/usr/bin/env bash
# libFuzzer targets (fuzz/README.md) for the code that parses untrusted input: the IDX dataset
# reader, the .npy reader, the command line / --config parser, the checkpoint reader, the
# model-file parser and the token-stream readers (HDF5 token splits, llm.c and uint16 .bin
# files). Configures a separate
# clang build in build-fuzz/ (ASan + UBSan + coverage on the drtrain libraries; CPU only, no
# tests, no benchmarks), builds only the fuzz targets, and runs each for DRT_FUZZ_SECONDS
# (default 20) from its seed corpus in fuzz/corpus/. Exits non-zero on any finding; the input
# that triggered it is left in build-fuzz/fuzz-artifacts/<target>/. Crashes inside libhdf5
# itself are a known library limitation: counted, kept aside, not failures (fuzz/README.md).
# About 95 s on 2 cores from an empty build-fuzz/ (build about 35 s).
#   DRT_FUZZ_SECONDS=600 scripts/fuzz_check.sh            longer runs
#   DRT_FUZZ_TARGETS="idx config" scripts/fuzz_check.sh   some targets only
set -euo pipefail
source "$(dirname "$0")/common.sh"
DRT_BUILD="$DRT_ROOT/build-fuzz"
seconds=${DRT_FUZZ_SECONDS:-20}
targets=${DRT_FUZZ_TARGETS:-idx npy config checkpoint model tokens}

cmake -S "$DRT_ROOT" -B "$DRT_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
      -DDRT_BUILD_FUZZERS=ON -DDRT_SANITIZE=fuzzer-no-link,address,undefined \
      -DDRT_ENABLE_CUDA=OFF -DDRT_ENABLE_ONEDNN=OFF -DDRT_BUILD_BENCH=OFF -DDRT_BUILD_TESTS=OFF
cmake --build "$DRT_BUILD" -j "$DRT_JOBS" --target drt_fuzzers

# The harnesses' scratch files (fuzz/fuzz_util.hpp): one directory for the whole check, removed at
# the end (a crashing fuzzer exits without removing its own).
scratch_base=/tmp
[ -w /dev/shm ] && scratch_base=/dev/shm
export TMPDIR
TMPDIR=$(mktemp -d "$scratch_base/drt-fuzz-check.XXXXXX")
trap 'rm -rf "$TMPDIR"' EXIT

# UBSan stops at the first report, so that libFuzzer sees it as a crash. Leaks are reported
# (fuzz_checkpoint turns that off itself: libhdf5 keeps free lists until exit).
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# Valid checkpoints from drtrain's own writer, besides the committed seeds.
generated="$DRT_BUILD/fuzz-seeds/checkpoint"
rm -rf "$generated" && mkdir -p "$generated"
ASAN_OPTIONS=detect_leaks=0 "$DRT_BUILD/fuzz/make_checkpoint_seeds" "$generated"  # MPI keeps memory until exit

# Runs fuzz_$1 for $seconds in total. A crash inside libhdf5 itself (fuzz/triage.py: libhdf5
# 1.10 has known crashes on malformed files) is a known library limitation: its input is moved to
# build-fuzz/fuzz-artifacts/<target>/known-libhdf5/ and the run goes on from the corpus. Any other
# finding fails the check, unless the input run by itself crashes inside libhdf5 (see below).
fuzz_target() {
  local t=$1 corpus="$DRT_BUILD/fuzz-corpus/$1" artifacts="$DRT_BUILD/fuzz-artifacts/$1"
  local seeds=("$DRT_ROOT/fuzz/corpus/$t") deadline=$((SECONDS + seconds)) runs=0 execs=0 known=0 log unit n
  [ "$t" = checkpoint ] && seeds+=("$generated")
  mkdir -p "$corpus" "$artifacts"
  echo "fuzz check: fuzz_$t for ${seconds}s"
  while [ $((deadline - SECONDS)) -gt 0 ]; do
    runs=$((runs + 1))
    log="$artifacts/run-$runs.log"
    # New inputs go to the first directory (build-fuzz/), never into the repository.
    if "$DRT_BUILD/fuzz/fuzz_$t" -max_total_time=$((deadline - SECONDS)) -timeout=30 -rss_limit_mb=2560 \
         -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "${seeds[@]}" >"$log" 2>&1; then
      n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log"); execs=$((execs + ${n:-0}))
      break
    fi
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log"); execs=$((execs + ${n:-0}))
    unit=$(sed -n 's/.*Test unit written to //p' "$log" | tail -n 1)
    # Triage the report, or else the input's report when it runs alone: in a long run ASan may
    # describe a chunk libhdf5 freed by the drtrain allocation that reused it, which a run of the
    # input by itself does not.
    if [ -n "$unit" ] && { /usr/bin/python3 "$DRT_ROOT/fuzz/triage.py" "$log" >"$log.triage" ||
         { ! "$DRT_BUILD/fuzz/fuzz_$t" "$unit" >"$log.alone" 2>&1 &&
           /usr/bin/python3 "$DRT_ROOT/fuzz/triage.py" "$log.alone" >>"$log.triage"; }; }; then
      known=$((known + 1))
      mkdir -p "$artifacts/known-libhdf5"
      mv "$unit" "$artifacts/known-libhdf5/" && mv "$log" "$artifacts/known-libhdf5/$(basename "$unit").log"
      mv "$log.triage" "$artifacts/known-libhdf5/$(basename "$unit").triage"
      rm -f "$corpus/$(basename "$unit" | sed 's/^[a-z-]*-//')"  # a corpus input that crashes libhdf5 on reload
      echo "  a known libhdf5 crash ($(grep -m1 -oE 'ERROR: [A-Za-z]+: [A-Za-z-]+' "$artifacts/known-libhdf5/$(basename "$unit").log" || echo crash)); going on"
      continue
    fi
    cat "$log"
    [ -f "$log.triage" ] && cat "$log.triage"
    echo "fuzz check: fuzz_$t found a problem; the input is ${unit:-in $artifacts/} (log: $log)" >&2
    exit 1
  done
  echo "  fuzz_$t: $execs inputs in ${seconds}s, corpus $(ls "$corpus" | wc -l) files$([ "$known" -eq 0 ] ||
       echo ", $known known libhdf5 crashes (build-fuzz/fuzz-artifacts/$t/known-libhdf5/)")"
}

for t in $targets; do
  fuzz_target "$t"
done
echo "fuzz check: passed"
