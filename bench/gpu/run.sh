#!/usr/bin/env bash
# The GPU-host check of drtrain: one script, run from the repository root on a machine with an
# NVIDIA GPU and the CUDA stack but no MPI, HDF5, Boost, compiler or network. It uses the bundle
# that scripts/make_gpu_bundle.sh wrote to .gpu/drtrain-gpu.tar.{xz,gz} (see bench/gpu/README.md).
#
#   bash bench/gpu/run.sh OUTDIR [--device cuda|cpu] [--quick] [--budget SECONDS] [--rounds R]
#                                [--bundle FILE]
#
#   --device cpu   run the training steps on the CPU (a dry run of the plumbing on a machine
#                  without a GPU); default cuda
#   --quick        few steps everywhere (plumbing checks)
#   --budget S     wall-clock budget of the whole script (default 450 s); every step runs under
#                  `timeout`, capped by what is left of the budget
#   --rounds R     run the throughput configurations R times, round-robin (default 1); the
#                  summary gives every round and the median of the drtrain/torch ratios
#
# Steps (each recorded as passed / failed / skipped with its exit status and reason; a failing
# step never stops the script):
#   unpack, host (nvidia-smi, glibc), glibc, ldd, loopback, mpi_smoke,
#   gpu_tests        tests/drt_gpu_tests (gtest; exit 77 = no GPU -> skipped), XML report
#   bench_kernels    drt_bench_kernels --json OUTDIR/kernels.json
#   torch_cuda       whether the host's PyTorch sees the GPU
#   equivalence_*, overlap_equivalence, overlap_final_eval
#                    three 40-step --deterministic CNN runs with checkpoints: two sequential ones
#                    (the control: bitwise equal) and one with --overlap, which must equal them
#                    (drtrain-ckpt diff, tolerance 0); their final evaluations (after the loop,
#                    the epoch not ended) must be equal too
#   per round (names of round k > 1 end in _rk):
#   drtrain_cnn_synthetic, drtrain_cnn_fashion-mnist
#                    mpirun -np 2 drtrain --num-ps 1 --device cuda --model cnn --batch-size 256
#                    (synthetic: fixed steps, no eval; Fashion-MNIST: one epoch, with eval)
#   drtrain_cnn_synthetic_{overlap,tf32,tf32_overlap,tf32_overlap_bf16,tf32_overlap_ps2,
#                    tf32_overlap_ps4,tf32_ps4}, drtrain_resnet20_synthetic{,_overlap}
#                    the same with --overlap, --cuda-tf32, --wire bf16, 2 or 4 PS ranks (striped)
#   torch_cnn_synthetic, torch_cnn_fashion-mnist, torch_{cnn,resnet20}_synthetic_benchmark
#                    bench/peers/torch_train.py --device cuda, same model, batch and step windows
#                    (_benchmark: cudnn.benchmark on, PyTorch's best setting)
#
# OUTDIR receives at most 8 files (the device tool returns no more): summary.json, run.log,
# gpu_tests.xml, kernels.json, cnn_synthetic.jsonl, cnn_fashion-mnist.jsonl (drtrain --metrics),
# logs.tar.gz (every step's full output).
# Exit status: 0 all steps passed; 1 a step failed; 2 none failed but some were skipped.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUTDIR="" DEVICE=cuda QUICK=0 BUDGET=450 BUNDLE="" ROUNDS=1
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --budget) BUDGET=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --bundle) BUNDLE=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) OUTDIR=$1; shift ;;
  esac
done
[[ -n $OUTDIR ]] || { usage >&2; exit 2; }
[[ $DEVICE == cuda || $DEVICE == cpu ]] || { echo "run.sh: --device cuda|cpu" >&2; exit 2; }
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd) || { echo "run.sh: cannot create $OUTDIR" >&2; exit 2; }
WORK=$(mktemp -d /tmp/drt_gpu_run.XXXXXX)
LOGS=$WORK/logs STEPS=$WORK/steps.jsonl
mkdir -p "$LOGS"
: > "$STEPS"
exec > >(tee "$OUTDIR/run.log") 2>&1
TEE_PID=$!
T0=$SECONDS
# The environment before the bundle: python3, nvidia-smi and torch run with it (the bundle's
# Debian libraries must not replace theirs).
ORIG_PATH=$PATH ORIG_LD=${LD_LIBRARY_PATH:-}
host_env() { env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD" "$@"; }

# Steps per configuration: drtrain logs progress every WARM steps and the first record (the
# warm-up) is left out of the steady figure; the torch peer times the same window.
if [[ $QUICK == 1 ]]; then
  WARM=5 SYN_STEPS=25 FM_STEPS=20
else
  WARM=50 SYN_STEPS=300 FM_STEPS=0  # 0: one whole epoch (234 steps of 256)
fi
BATCH=256

log() { echo "[run.sh $(date +%H:%M:%S) +$((SECONDS - T0))s] $*"; }
record() {  # name status rc reason seconds
  python3_host - "$STEPS" "$@" <<'EOF'
import json, sys
path, name, status, rc, reason, secs = sys.argv[1:7]
with open(path, "a") as f:
    f.write(json.dumps({"step": name, "status": status, "rc": int(rc) if rc.lstrip("-").isdigit() else None,
                        "reason": reason, "seconds": float(secs)}) + "\n")
EOF
  log "step $1: $2${4:+ ($4)}"
}
python3_host() { host_env python3 "$@"; }

# run_step NAME CAP_S -- command...: runs the command under timeout (the cap, or what is left of
# the budget), output to $LOGS/NAME.log (its tail also to run.log); sets RC. Does not record.
run_step() {
  local name=$1 cap=$2; shift 3
  local left=$((BUDGET - (SECONDS - T0) - 25)) t
  t=$(( cap < left ? cap : left ))
  if (( t < 5 )); then RC=-1; REASON="time budget of ${BUDGET}s used up"; return; fi
  log "step $name (timeout ${t}s): $*"
  local s0=$SECONDS
  timeout -k 10 "$t" "$@" > "$LOGS/$name.log" 2>&1 < /dev/null
  RC=$?
  STEP_S=$((SECONDS - s0))
  REASON=""
  (( RC == 124 || RC == 137 )) && REASON="timed out after ${t}s"
  tail -n 25 "$LOGS/$name.log" | sed "s/^/  [$name] /"
}
STEP_S=0

# ---------------------------------------------------------------------------------------------
# Unpack the bundle.
log "drtrain GPU run: device=$DEVICE quick=$QUICK budget=${BUDGET}s out=$OUTDIR work=$WORK"
if [[ -z $BUNDLE ]]; then
  for f in "$ROOT/.gpu/drtrain-gpu.tar.xz" "$ROOT/.gpu/drtrain-gpu.tar.gz"; do [[ -f $f ]] && { BUNDLE=$f; break; }; done
fi
B=$WORK/drtrain-gpu
if [[ -z $BUNDLE || ! -f $BUNDLE ]]; then
  record unpack failed 1 "no bundle: ${BUNDLE:-.gpu/drtrain-gpu.tar.xz or .tar.gz} not found (run scripts/make_gpu_bundle.sh on the build machine, then carry .gpu)" 0
else
  s0=$SECONDS
  # tar with xz/gzip where present, else Python's tarfile.
  if { [[ $BUNDLE == *.xz ]] && command -v xz >/dev/null || [[ $BUNDLE == *.gz ]]; } && tar -C "$WORK" -xaf "$BUNDLE" 2>"$LOGS/unpack.log"; then
    rc=0
  else
    python3_host -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$BUNDLE" "$WORK" >>"$LOGS/unpack.log" 2>&1
    rc=$?
  fi
  # The Fashion-MNIST files travel uncompressed (smaller inside the .xz); drtrain reads .gz names.
  if [[ $rc == 0 ]]; then
    for f in "$B"/data/fashion-mnist/*-ubyte; do
      [[ -f $f ]] || continue
      if command -v gzip >/dev/null; then gzip -1 -f "$f"
      else python3_host -c 'import gzip, shutil, sys, os
with open(sys.argv[1], "rb") as i, gzip.open(sys.argv[1] + ".gz", "wb", 1) as o: shutil.copyfileobj(i, o)
os.remove(sys.argv[1])' "$f"; fi || rc=1
    done
  fi
  if [[ $rc == 0 ]]; then record unpack passed 0 "$(basename "$BUNDLE") -> $B" $((SECONDS - s0))
  else record unpack failed "$rc" "cannot unpack $BUNDLE: $(tail -2 "$LOGS/unpack.log" | tr '\n' ' ')" $((SECONDS - s0)); fi
fi
HAVE_BUNDLE=0
[[ -f $B/env.sh && -x $B/bin/drtrain ]] && HAVE_BUNDLE=1
[[ $HAVE_BUNDLE == 1 ]] && cat "$B/BUNDLE_INFO.json"

# ---------------------------------------------------------------------------------------------
# Host: GPU, driver, glibc.
GPU=0
{
  echo "uname: $(uname -a)"
  echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null)"
  echo "cpus: $(nproc)"
  echo "python3: $(host_env python3 --version 2>&1)"
} > "$WORK/host.txt"
if command -v nvidia-smi >/dev/null; then
  run_step host 30 -- env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD" nvidia-smi
  host_env timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm \
    --format=csv,noheader > "$WORK/gpu.csv" 2>>"$WORK/host.txt"
  if [[ $RC == 0 && -s $WORK/gpu.csv ]]; then
    GPU=1; record host passed 0 "$(head -1 "$WORK/gpu.csv")" "$STEP_S"
  else
    record host failed "$RC" "nvidia-smi failed: ${REASON:-$(tail -1 "$LOGS/host.log")}" "$STEP_S"
  fi
else
  echo "nvidia-smi: not found" >> "$WORK/host.txt"
  if [[ $DEVICE == cuda ]]; then record host failed 127 "no NVIDIA GPU here: nvidia-smi not found" 0
  else record host skipped 127 "nvidia-smi not found (--device cpu dry run)" 0; fi
fi
cat "$WORK/host.txt"
NO_GPU_REASON=""
[[ $DEVICE == cuda && $GPU == 0 ]] && NO_GPU_REASON="no usable NVIDIA GPU (see step host)"

# The bundle's environment (bundle first, host CUDA libraries after it).
DRTRAIN_OK=0
if [[ $HAVE_BUNDLE == 1 ]]; then
  # shellcheck disable=SC1091
  source "$B/env.sh"
  log "env: DRT_BUNDLE_CXX=$DRT_BUNDLE_CXX DRT_CUDA_LIB_DIRS=${DRT_CUDA_LIB_DIRS:-none}"
  log "env: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  # glibc: the host's against the bundle's floor (Debian 12's libevent needs 2.36; the floor with
  # lib/cxx counts when env.sh chose the bundled libstdc++).
  key=glibc_required
  [[ $DRT_BUNDLE_CXX == bundled ]] && key=glibc_required_with_lib_cxx
  need=$(python3_host -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$B/BUNDLE_INFO.json" "$key" 2>/dev/null)
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [[ -z $have || -z $need ]]; then
    record glibc failed 1 "cannot tell: host glibc '${have}', bundle needs '${need}'" 0
  elif [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) == "$need" ]]; then
    record glibc passed 0 "host glibc $have >= bundle floor $need (libstdc++: $DRT_BUNDLE_CXX)" 0
  else
    record glibc failed 1 "host glibc $have < bundle floor $need (libstdc++: $DRT_BUNDLE_CXX): remake the bundle with scripts/make_gpu_bundle.sh --rebuild-libevent (floor 2.34)" 0
  fi
  # ldd: no "not found" for any program.
  : > "$LOGS/ldd.log"
  missing=""
  for f in "$B"/bin/* "$B"/tests/*; do
    [[ -f $f && ! -L $f ]] || continue
    echo "== ${f#"$B"/}" >> "$LOGS/ldd.log"
    timeout 20 ldd "$f" >> "$LOGS/ldd.log" 2>&1
    nf=$(timeout 20 ldd "$f" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ' ')
    [[ -z $nf ]] || missing+="$(basename "$f"): $nf; "
  done
  grep -E 'libcudart|libcublas|libcudnn|libnccl|libcuda\.' "$LOGS/ldd.log" | sed 's/ (0x.*//' | sort -u | sed 's/^/  [ldd] /'
  if [[ -z $missing ]]; then record ldd passed 0 "every program's libraries resolve" 0
  else record ldd failed 1 "not found: $missing" 0; fi
  DRTRAIN_OK=1
  grep -A100 '== bin/drtrain$' "$LOGS/ldd.log" | sed '/^== bin\/drtrain-ckpt/,$d' | grep 'not found' >/dev/null && DRTRAIN_OK=0
else
  record glibc skipped -1 "no bundle" 0
  record ldd skipped -1 "no bundle" 0
fi

# Loopback: without it mpirun stops with "The PMIx server's listener thread failed to start".
lo_state() { cat /sys/class/net/lo/operstate 2>/dev/null || echo unknown; }
if command -v ip >/dev/null; then ip link set lo up >/dev/null 2>&1; fi
if python3_host -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); c=socket.create_connection(s.getsockname(), 5)' 2>"$LOGS/loopback.log"; then
  record loopback passed 0 "127.0.0.1 connects (lo operstate $(lo_state))" 0
else
  record loopback failed 1 "127.0.0.1 does not connect (lo operstate $(lo_state)); try: ip link set lo up" 0
fi

MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
if [[ $HAVE_BUNDLE == 1 ]]; then
  run_step mpi_smoke 40 -- "${MPI[@]}" -np 2 uname -n
  if [[ $RC == 0 ]]; then record mpi_smoke passed 0 "mpirun -np 2 uname -n" "$STEP_S"
  else record mpi_smoke failed "$RC" "${REASON:-bundled mpirun failed: $(tail -1 "$LOGS/mpi_smoke.log")}" "$STEP_S"; fi
  timeout 20 ompi_info --path all > "$LOGS/ompi_info.log" 2>&1
else
  record mpi_smoke skipped -1 "no bundle" 0
fi

# ---------------------------------------------------------------------------------------------
# (a) GPU tests and (b) the kernel benchmark: bundled programs that exit 77 without a usable GPU.
# gpu_program_step NAME CAP PATH-IN-BUNDLE [ARGS...]
gpu_program_step() {
  local name=$1 cap=$2 program=$3 log
  shift 3
  log="$LOGS/$name.log"
  if [[ $HAVE_BUNDLE == 0 ]]; then
    record "$name" skipped -1 "no bundle" 0
    return
  fi
  if [[ ! -x $B/$program ]]; then
    record "$name" skipped -1 "$program not in the bundle (target not built when the bundle was made)" 0
    return
  fi
  run_step "$name" "$cap" -- "$B/$program" "$@"
  case $RC in
    0) record "$name" passed 0 "" "$STEP_S" ;;
    77) record "$name" skipped 77 "exit 77: $(grep -m1 -i 'no usable GPU' "$log" || tail -n 1 "$log")" "$STEP_S" ;;
    -1) record "$name" skipped -1 "$REASON" 0 ;;
    *) record "$name" failed "$RC" "${REASON:-exit status $RC: $(grep -m1 -E '^\[  FAILED  \] [0-9]+ test' "$log" || tail -n 1 "$log")}" "$STEP_S" ;;
  esac
}
rm -f "$OUTDIR/gpu_tests.xml" "$OUTDIR/kernels.json"
gpu_program_step gpu_tests 150 tests/drt_gpu_tests "--gtest_output=xml:$OUTDIR/gpu_tests.xml"
gpu_program_step bench_kernels 60 bin/drt_bench_kernels --json "$OUTDIR/kernels.json"

# (c) drtrain: CNN, 1 PS + 1 worker (one GPU tower), global batch 256.
DEV_FLAG=()
DEV_REASON=""
if [[ $HAVE_BUNDLE == 1 ]]; then
  if "$B/bin/drtrain" --help 2>/dev/null | grep -E '^ +--device' >/dev/null; then
    DEV_FLAG=(--device "$DEVICE")
  elif [[ $DEVICE == cuda ]]; then
    DEV_REASON="this drtrain has no --device option (the bundle was made from a build without the CUDA backend)"
  fi
  ldd "$B/bin/drtrain" 2>/dev/null | grep -E 'libcudart' >/dev/null || log "note: bin/drtrain does not link libcudart (CPU-only build?)"
fi
drtrain_run() {  # step-name metrics-file drtrain-args... (PS=${PS:-1} PS ranks + 1 worker on the GPU)
  local name=$1 metrics=$2 ps=${PS:-1}; shift 2
  if [[ $HAVE_BUNDLE == 0 || $DRTRAIN_OK == 0 ]]; then record "$name" skipped -1 "no usable bin/drtrain (see steps unpack, ldd)" 0; return; fi
  [[ -n $NO_GPU_REASON ]] && { record "$name" skipped -1 "$NO_GPU_REASON" 0; return; }
  [[ -n $DEV_REASON ]] && { record "$name" failed -1 "$DEV_REASON" 0; return; }
  rm -f "$metrics"
  local cmd=("${MPI[@]}" -np $((ps + 1)) drtrain --num-ps "$ps" "${DEV_FLAG[@]}" --batch-size "$BATCH" --log-every "$WARM"
             --metrics "$metrics" "$@")
  run_step "$name" "$CAP" -- "${cmd[@]}"
  # A container that forbids cross-memory attach (process_vm_readv) breaks osc/rdma: retry
  # once without single-copy (GPU_HOST_RECIPE.md, "RMA and shared-memory single-copy").
  if [[ $RC != 0 && $RC != -1 && -z $REASON ]] && grep -Eiq 'errno = 1|process_vm_readv|single.copy|MPI_ERR_WIN' "$LOGS/$name.log"; then
    log "$name: retrying with OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_osc=sm,pt2pt"
    cp "$LOGS/$name.log" "$LOGS/$name.first.log"
    run_step "$name" "$CAP" -- env OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_osc=sm,pt2pt "${cmd[@]}"
  fi
  if [[ $RC == 0 ]] && grep '^{"summary":true' "$LOGS/$name.log" >/dev/null; then
    record "$name" passed 0 "$(grep '^{"summary":true' "$LOGS/$name.log" | tail -1 | cut -c1-200)" "$STEP_S"
  elif [[ $RC == -1 ]]; then
    record "$name" skipped -1 "$REASON" 0
  else
    record "$name" failed "$RC" "${REASON:-exit status $RC$([[ $RC == 0 ]] && echo ', no summary line'): $(grep -iE 'error|abort' "$LOGS/$name.log" | head -2 | tr '\n' ' ' | cut -c1-300)}" "$STEP_S"
  fi
}
# (d) PyTorch peer on the same GPU, same model, batch and step windows (host environment).
PEER=$ROOT/bench/peers/torch_train.py
[[ -f $PEER ]] || PEER=$B/peers/torch_train.py
TORCH_OK=0
if [[ -n $NO_GPU_REASON ]]; then
  record torch_cuda skipped -1 "$NO_GPU_REASON" 0
else
  if [[ $DEVICE == cuda ]]; then probe='import torch; assert torch.cuda.is_available(), "torch.cuda.is_available() is False"; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'
  else probe='import torch, numpy; print(torch.__version__)'; fi
  run_step torch_cuda 90 -- env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD" python3 -c "$probe"
  if [[ $RC == 0 ]]; then TORCH_OK=1; record torch_cuda passed 0 "$(tail -1 "$LOGS/torch_cuda.log")" "$STEP_S"
  elif [[ $RC == -1 ]]; then record torch_cuda skipped -1 "$REASON" 0
  elif [[ -z $REASON ]] && grep -E "ModuleNotFoundError|ImportError" "$LOGS/torch_cuda.log" >/dev/null; then
    record torch_cuda skipped "$RC" "no torch here: $(tail -1 "$LOGS/torch_cuda.log")" "$STEP_S"
  else record torch_cuda failed "$RC" "torch cannot use the GPU: ${REASON:-$(tail -1 "$LOGS/torch_cuda.log")}" "$STEP_S"; fi
fi
torch_run() {  # step-name model dataset timed-steps [extra peer args]
  local name=$1 model=$2 dataset=$3 steps=$4
  shift 4
  [[ $TORCH_OK == 1 ]] || { record "$name" skipped -1 "torch not usable (see step torch_cuda)" 0; return; }
  local data=()
  [[ $dataset == fashion-mnist ]] && data=(--data-dir "$B/data/fashion-mnist")
  run_step "$name" 90 -- env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD" PYTHONUNBUFFERED=1 python3 "$PEER" \
    --device "$DEVICE" --model "$model" --dataset "$dataset" "${data[@]}" --batch-size "$BATCH" \
    --warmup "$WARM" --steps "$steps" --threads "$(( $(nproc) < 4 ? $(nproc) : 4 ))" "$@"
  if [[ $RC == 0 ]] && grep '^{"peer": "torch"' "$LOGS/$name.log" >/dev/null; then
    record "$name" passed 0 "$(grep '^{"peer": "torch"' "$LOGS/$name.log" | tail -1 | cut -c1-200)" "$STEP_S"
  elif [[ $RC == -1 ]]; then record "$name" skipped -1 "$REASON" 0
  else record "$name" failed "$RC" "${REASON:-exit status $RC: $(tail -1 "$LOGS/$name.log" | cut -c1-300)}" "$STEP_S"; fi
}
FM=(--dataset fashion-mnist --data-dir "$B/data/fashion-mnist")
# Synthetic: 300 steps run past the 234-step epoch, hence --epochs 2 (--max-steps stops it).
SYN=(--dataset synthetic --epochs 2 --max-steps "$SYN_STEPS" --eval false)
# --overlap on the GPU computes exactly what the sequential step does: with --deterministic
# (per-worker slots, deterministic cuDNN algorithms) two sequential runs give bitwise the same
# final checkpoint (the control), and the overlapped run must give that same checkpoint too.
overlap_equivalence() {
  local k files=()
  for k in seq1 seq2 overlap; do
    local extra=()
    [[ $k == overlap ]] && extra=(--overlap true --bucket-kib 64)
    rm -rf "$WORK/ck_$k"
    drtrain_run "equivalence_$k" "$LOGS/equivalence_$k.jsonl" --model cnn "${FM[@]}" --epochs 1 --max-steps 40 \
      --test-samples 2000 --deterministic --checkpoint-dir "$WORK/ck_$k" "${extra[@]}"
    files+=("$(ls -t "$WORK/ck_$k"/*.h5 2>/dev/null | head -1)")
  done
  if [[ -z ${files[0]} || -z ${files[1]} || -z ${files[2]} ]]; then
    record overlap_equivalence failed 1 "a run left no checkpoint (see steps equivalence_*)" 0; return
  fi
  run_step overlap_equivalence_control 30 -- "$B/bin/drtrain-ckpt" diff "${files[0]}" "${files[1]}"
  local control=$RC
  run_step overlap_equivalence 30 -- "$B/bin/drtrain-ckpt" diff "${files[0]}" "${files[2]}"
  if [[ $control != 0 ]]; then
    record overlap_equivalence failed "$control" "the control (two sequential --deterministic runs) differs: the GPU run is not reproducible, so the comparison says nothing" "$STEP_S"
  elif [[ $RC == 0 ]]; then
    record overlap_equivalence passed 0 "--overlap true equals the sequential step bitwise after 40 steps (control: two sequential runs equal)" "$STEP_S"
  else
    record overlap_equivalence failed "$RC" "--overlap true ends with other parameters than the sequential step: $(grep -v '^ *0' "$LOGS/overlap_equivalence.log" | head -3 | tr '\n' ' ' | cut -c1-300)" "$STEP_S"
  fi
  # The 40 steps end inside the epoch: the final evaluation runs after the loop, once the
  # overlap pipeline is gone, and must see the last update (it used to see the one before).
  local seq_eval overlap_eval
  seq_eval=$(grep -o 'final test: .*' "$LOGS/equivalence_seq1.log" | tail -1)
  overlap_eval=$(grep -o 'final test: .*' "$LOGS/equivalence_overlap.log" | tail -1)
  if [[ -z $seq_eval || -z $overlap_eval ]]; then
    record overlap_final_eval failed 1 "no final evaluation line in the equivalence runs' logs" 0
  elif [[ $seq_eval == "$overlap_eval" ]]; then
    record overlap_final_eval passed 0 "the final evaluation with --overlap equals the sequential run's: $seq_eval" 0
  else
    record overlap_final_eval failed 1 "final evaluation: sequential '$seq_eval', --overlap '$overlap_eval'" 0
  fi
}
CAP=60
overlap_equivalence

# Round k of the throughput runs: every drtrain configuration, then every torch one, so that a
# drift of the shared machine's speed (seen: 1.5x between two runs an hour apart) shows as a
# spread between rounds rather than as a ratio. Step names and metrics of round k > 1 end in _rk;
# round 1's CNN metrics go to OUTDIR.
metrics() { if [[ -z $R ]]; then echo "$OUTDIR/$1.jsonl"; else echo "$LOGS/$1$R.jsonl"; fi; }
training_round() {
  local R=$1
  CAP=90
  drtrain_run "drtrain_cnn_synthetic$R" "$(metrics cnn_synthetic)" --model cnn "${SYN[@]}"
  CAP=120
  drtrain_run "drtrain_cnn_fashion-mnist$R" "$(metrics cnn_fashion-mnist)" --model cnn "${FM[@]}" --epochs 1 --max-steps "$FM_STEPS" --eval true
  # Variants (metrics in logs.tar.gz): --overlap (the exchange during backward and forward), TF32
  # tensor cores (what PyTorch's convolutions use by default), and the residual network.
  CAP=60
  drtrain_run "drtrain_cnn_synthetic_overlap$R" "$LOGS/cnn_synthetic_overlap$R.jsonl" --model cnn "${SYN[@]}" --overlap true
  drtrain_run "drtrain_cnn_synthetic_tf32$R" "$LOGS/cnn_synthetic_tf32$R.jsonl" --model cnn "${SYN[@]}" --cuda-tf32 true
  drtrain_run "drtrain_cnn_synthetic_tf32_overlap$R" "$LOGS/cnn_synthetic_tf32_overlap$R.jsonl" --model cnn "${SYN[@]}" --cuda-tf32 true --overlap true
  # The exchange itself: bf16 on the wire, and more PS ranks (the host's cores apply the update and
  # take the accumulates in parallel; striped, the big fc1 layer is spread over all of them).
  drtrain_run "drtrain_cnn_synthetic_tf32_overlap_bf16$R" "$LOGS/cnn_synthetic_tf32_overlap_bf16$R.jsonl" --model cnn "${SYN[@]}" --cuda-tf32 true --overlap true --wire bf16
  PS=2 drtrain_run "drtrain_cnn_synthetic_tf32_overlap_ps2$R" "$LOGS/cnn_synthetic_tf32_overlap_ps2$R.jsonl" --model cnn "${SYN[@]}" --cuda-tf32 true --overlap true --shard-plan striped
  PS=4 drtrain_run "drtrain_cnn_synthetic_tf32_overlap_ps4$R" "$LOGS/cnn_synthetic_tf32_overlap_ps4$R.jsonl" --model cnn "${SYN[@]}" --cuda-tf32 true --overlap true --shard-plan striped
  PS=4 drtrain_run "drtrain_cnn_synthetic_tf32_ps4$R" "$LOGS/cnn_synthetic_tf32_ps4$R.jsonl" --model cnn "${SYN[@]}" --cuda-tf32 true --shard-plan striped
  drtrain_run "drtrain_resnet20_synthetic$R" "$LOGS/resnet20_synthetic$R.jsonl" --model resnet20 "${SYN[@]}"
  drtrain_run "drtrain_resnet20_synthetic_overlap$R" "$LOGS/resnet20_synthetic_overlap$R.jsonl" --model resnet20 "${SYN[@]}" --overlap true
  # Timed windows as drtrain's steady figures: synthetic steps WARM+1..SYN_STEPS; Fashion-MNIST one
  # epoch of 60000 / 256 = 234 steps, the records at WARM, 2 WARM, ..., 200 and the last at 234.
  torch_run "torch_cnn_synthetic$R" cnn synthetic $((SYN_STEPS - WARM))
  if [[ $FM_STEPS == 0 ]]; then torch_run "torch_cnn_fashion-mnist$R" cnn fashion-mnist $((60000 / BATCH - WARM))
  else torch_run "torch_cnn_fashion-mnist$R" cnn fashion-mnist $((FM_STEPS - WARM)); fi
  # PyTorch's best settings on a GPU: cuDNN autotuning on (TF32 convolutions are its default).
  torch_run "torch_cnn_synthetic_benchmark$R" cnn synthetic $((SYN_STEPS - WARM)) --cudnn-benchmark
  torch_run "torch_resnet20_synthetic_benchmark$R" resnet20 synthetic $((SYN_STEPS - WARM)) --cudnn-benchmark
}
for ((round = 1; round <= ROUNDS; round++)); do
  log "training round $round of $ROUNDS"
  training_round "$([[ $round == 1 ]] || echo "_r$round")"
done

# ---------------------------------------------------------------------------------------------
# (e) summary.json
log "assembling $OUTDIR/summary.json"
python3_host - "$OUTDIR" "$LOGS" "$STEPS" "$WORK/gpu.csv" "$B" "$DEVICE" "$WARM" "$BATCH" "$BUNDLE" "$WORK/host.txt" <<'EOF'
import json, os, re, sys, time
import xml.etree.ElementTree as ET

out, logs, steps_path, gpu_csv, bundle, device, warm, batch, bundle_file, host_txt = sys.argv[1:11]
warm, batch = int(warm), int(batch)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


steps = {}
for line in read(steps_path).splitlines():
    r = json.loads(line)
    steps[r.pop("step")] = r

host = {"device_requested": device}
for line in read(host_txt).splitlines():
    k, _, v = line.partition(": ")
    host[k] = v
g = read(gpu_csv).strip().splitlines()
if g:
    f = [x.strip() for x in g[0].split(",")]
    host.update(zip(["gpu", "driver", "gpu_memory", "compute_capability", "max_sm_clock"], f))
    host["gpus"] = len(g)
m = re.search(r"CUDA Version:\s*([0-9.]+)", read(os.path.join(logs, "host.log")))
if m:
    host["driver_cuda_version"] = m.group(1)
try:
    info = json.load(open(os.path.join(bundle, "BUNDLE_INFO.json")))
except (OSError, ValueError):
    info = None
host["bundle"] = info
host["bundle_file"] = bundle_file
host["drt_bundle_cxx"] = os.environ.get("DRT_BUNDLE_CXX")
host["cuda_lib_dirs"] = os.environ.get("DRT_CUDA_LIB_DIRS")

# GPU tests from the gtest XML.
tests = None
xml_path = os.path.join(out, "gpu_tests.xml")
if os.path.exists(xml_path):
    tests = {"passed": 0, "failed": 0, "skipped": 0, "disabled": 0, "failed_names": [], "xml": "gpu_tests.xml"}
    try:
        for tc in ET.parse(xml_path).getroot().iter("testcase"):
            name = f'{tc.get("classname")}.{tc.get("name")}'
            if tc.find("failure") is not None or tc.find("error") is not None:
                tests["failed"] += 1
                tests["failed_names"].append(name)
            elif tc.find("skipped") is not None or tc.get("result") == "skipped":
                tests["skipped"] += 1
            elif tc.get("status") == "notrun" or tc.get("result") == "suppressed":
                tests["disabled"] += 1
            else:
                tests["passed"] += 1
    except ET.ParseError as e:
        tests["error"] = f"unreadable XML: {e}"
elif "gpu_tests" in steps:
    tests = {"status": steps["gpu_tests"]["status"], "reason": steps["gpu_tests"]["reason"]}

kernels = None
kpath = os.path.join(out, "kernels.json")
if os.path.exists(kpath):
    try:
        kernels = json.load(open(kpath))
    except ValueError:
        # JSON lines?
        try:
            kernels = [json.loads(l) for l in read(kpath).splitlines() if l.strip()]
        except ValueError as e:
            kernels = {"error": f"kernels.json unreadable: {e}"}


def drtrain_figures(name, metrics):
    res = {"status": steps.get(name, {}).get("status")}
    summary = None
    for line in read(os.path.join(logs, f"{name}.log")).splitlines():
        if line.startswith('{"summary":true'):
            summary = json.loads(line)
    records, evals = [], []
    for line in read(metrics).splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("summary"):
            summary = summary or r
        elif r.get("eval"):
            evals.append(r)
        elif "step" in r and "samples_per_s" in r:
            records.append(r)
    if summary:
        res["summary"] = summary
        res["samples_per_s_whole_loop"] = summary.get("samples_per_s")
        res["test_accuracy"] = summary.get("test_accuracy")
    # Steady figure: records after the first (which holds the warm-up steps); each record covers
    # the steps since the previous one, so seconds = samples / rate.
    samples = secs = 0.0
    phases, nsteps, prev = {}, 0, None
    for r in records:
        if prev is not None:
            n = r["step"] - prev
            samples += n * batch
            secs += n * batch / r["samples_per_s"]
            nsteps += n
            for k, v in (r.get("ms_per_step") or {}).items():
                phases[k] = phases.get(k, 0.0) + n * v
        prev = r["step"]
    if secs > 0:
        res["samples_per_s"] = samples / secs
        res["steady_steps"] = nsteps
        res["steady_from_step"] = records[0]["step"] + 1
        res["ms_per_step_avg"] = {k: v / nsteps for k, v in phases.items()}
        res["step_ms_last"] = records[-1].get("step_ms")
    elif records:
        res["samples_per_s"] = records[-1]["samples_per_s"]
        res["ms_per_step_avg"] = records[-1].get("ms_per_step")
        res["note"] = "one progress record only: figure includes the warm-up"
    if evals:
        res["evals"] = evals
    return res


def torch_figures(name):
    res = {"status": steps.get(name, {}).get("status")}
    for line in read(os.path.join(logs, f"{name}.log")).splitlines():
        if line.startswith('{"peer": "torch"'):
            rec = json.loads(line)
            res.update(rec)
    return res


# key: (drtrain step, its metrics, the torch step it is compared with)
configs = {
    "synthetic": ("drtrain_cnn_synthetic", os.path.join(out, "cnn_synthetic.jsonl"), "torch_cnn_synthetic"),
    "fashion-mnist": ("drtrain_cnn_fashion-mnist", os.path.join(out, "cnn_fashion-mnist.jsonl"), "torch_cnn_fashion-mnist"),
    "synthetic_overlap": ("drtrain_cnn_synthetic_overlap", os.path.join(logs, "cnn_synthetic_overlap.jsonl"), "torch_cnn_synthetic"),
    "synthetic_tf32": ("drtrain_cnn_synthetic_tf32", os.path.join(logs, "cnn_synthetic_tf32.jsonl"), "torch_cnn_synthetic_benchmark"),
    "synthetic_tf32_overlap": ("drtrain_cnn_synthetic_tf32_overlap", os.path.join(logs, "cnn_synthetic_tf32_overlap.jsonl"), "torch_cnn_synthetic_benchmark"),
    "synthetic_tf32_overlap_bf16": ("drtrain_cnn_synthetic_tf32_overlap_bf16", os.path.join(logs, "cnn_synthetic_tf32_overlap_bf16.jsonl"), "torch_cnn_synthetic_benchmark"),
    "synthetic_tf32_overlap_ps2": ("drtrain_cnn_synthetic_tf32_overlap_ps2", os.path.join(logs, "cnn_synthetic_tf32_overlap_ps2.jsonl"), "torch_cnn_synthetic_benchmark"),
    "synthetic_tf32_overlap_ps4": ("drtrain_cnn_synthetic_tf32_overlap_ps4", os.path.join(logs, "cnn_synthetic_tf32_overlap_ps4.jsonl"), "torch_cnn_synthetic_benchmark"),
    "synthetic_tf32_ps4": ("drtrain_cnn_synthetic_tf32_ps4", os.path.join(logs, "cnn_synthetic_tf32_ps4.jsonl"), "torch_cnn_synthetic_benchmark"),
    "resnet20_synthetic": ("drtrain_resnet20_synthetic", os.path.join(logs, "resnet20_synthetic.jsonl"), "torch_resnet20_synthetic_benchmark"),
    "resnet20_synthetic_overlap": ("drtrain_resnet20_synthetic_overlap", os.path.join(logs, "resnet20_synthetic_overlap.jsonl"), "torch_resnet20_synthetic_benchmark"),
}
training = {}
for ds, (dname, dmetrics, tname) in configs.items():
    if dname not in steps:
        continue
    rounds = []
    for r in range(1, 100):
        sfx = "" if r == 1 else f"_r{r}"
        if dname + sfx not in steps:
            break
        metrics = dmetrics if r == 1 else os.path.join(logs, os.path.basename(dmetrics)[:-6] + sfx + ".jsonl")
        d, t = drtrain_figures(dname + sfx, metrics), torch_figures(tname + sfx)
        rr = {"drtrain": d, "torch": t}
        if d.get("samples_per_s") and t.get("samples_per_s"):
            rr["ratio_drtrain_over_torch"] = d["samples_per_s"] / t["samples_per_s"]
        rounds.append(rr)
    med = lambda xs: sorted(xs)[len(xs) // 2] if len(xs) % 2 else sum(sorted(xs)[len(xs) // 2 - 1:len(xs) // 2 + 1]) / 2
    entry = dict(rounds[0], torch_step=tname, rounds=len(rounds))
    if len(rounds) > 1:
        entry["per_round"] = [{"drtrain_samples_per_s": x["drtrain"].get("samples_per_s"),
                               "torch_samples_per_s": x["torch"].get("samples_per_s"),
                               "ratio": x.get("ratio_drtrain_over_torch")} for x in rounds]
        ratios = [x["ratio_drtrain_over_torch"] for x in rounds if "ratio_drtrain_over_torch" in x]
        if ratios:
            entry["ratio_drtrain_over_torch"] = med(ratios)  # the median of the rounds' ratios
        sps = [x["drtrain"]["samples_per_s"] for x in rounds if x["drtrain"].get("samples_per_s")]
        if sps:
            entry["drtrain_samples_per_s_median"] = med(sps)
    training[ds] = entry

failed = [k for k, v in steps.items() if v["status"] == "failed"]
skipped = [k for k, v in steps.items() if v["status"] == "skipped"]
summary = {
    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "overall": "failed" if failed else ("incomplete" if skipped else "passed"),
    "failed_steps": failed, "skipped_steps": skipped,
    "host": host, "steps": steps, "gpu_tests": tests, "kernels": kernels,
    "training": {"batch_size": batch, "warmup_steps": warm, **training},
}
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)

# A short view for the console (the device tool shows the tail of the output).
print("\n===== summary =====")
print(f'host: {host.get("gpu", "no GPU")} driver {host.get("driver", "-")} {host.get("glibc", "")} '
      f'bundle glibc floor {(info or {}).get("glibc_required", "?")}')
for k, v in steps.items():
    print(f'  {k:28} {v["status"]:8} rc={v["rc"]} {v["seconds"]:.0f}s {v["reason"][:150]}')
if isinstance(tests, dict) and "passed" in tests:
    print(f'gpu tests: {tests["passed"]} passed, {tests["failed"]} failed, {tests["skipped"]} skipped'
          + (f' (failed: {", ".join(tests["failed_names"][:10])})' if tests["failed_names"] else ""))
if isinstance(kernels, dict) and isinstance(kernels.get("kernels"), list):
    print(f'kernels on {kernels.get("device", "?")}: copy {kernels.get("copy_gbps", float("nan")):.0f} GB/s; '
          + ", ".join(f'{k.get("name")} {k.get("gbps", float("nan")):.0f} GB/s ({k.get("ratio_to_copy", float("nan")):.2f})'
                      for k in kernels["kernels"][:12]))
for ds, e in training.items():
    d, t = e["drtrain"], e["torch"]
    fmt = lambda x: f"{x:,.0f}" if isinstance(x, (int, float)) else "-"
    print(f'{ds:26} drtrain {fmt(d.get("samples_per_s"))} samples/s (whole loop {fmt(d.get("samples_per_s_whole_loop"))})'
          f'  {e["torch_step"]} {fmt(t.get("samples_per_s"))}  ratio {e.get("ratio_drtrain_over_torch", float("nan")):.2f}'
          + (f'  test acc {d["test_accuracy"]:.4f}' if d.get("test_accuracy") else ""))
    if e.get("per_round"):
        print("    rounds (drtrain / torch samples/s, ratio): " + "; ".join(
            f'{fmt(x["drtrain_samples_per_s"])} / {fmt(x["torch_samples_per_s"])}, {x["ratio"] or float("nan"):.2f}'
            for x in e["per_round"]) + " (ratio above: their median; figures above: round 1)")
    if d.get("ms_per_step_avg"):
        print("    drtrain ms/step: " + ", ".join(f"{k} {v:.2f}" for k, v in d["ms_per_step_avg"].items()))
print(f'overall: {summary["overall"]}' + (f' (failed: {", ".join(failed)})' if failed else ""))
EOF
SUMMARY_RC=$?
[[ $SUMMARY_RC == 0 ]] || log "summary assembly failed (exit $SUMMARY_RC); steps: $(cat "$STEPS")"

tar -C "$WORK" -czf "$OUTDIR/logs.tar.gz" logs steps.jsonl 2>/dev/null
log "done in $((SECONDS - T0))s; files in $OUTDIR: $(ls "$OUTDIR" | tr '\n' ' ')"
STATUS=0
grep '"status": "skipped"' "$STEPS" >/dev/null 2>&1 && STATUS=2
if [[ $SUMMARY_RC != 0 ]] || grep '"status": "failed"' "$STEPS" >/dev/null 2>&1; then STATUS=1; fi
log "exit status $STATUS (0 all passed, 1 a step failed, 2 some skipped)"
rm -rf "$WORK"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit $STATUS
