#!/usr/bin/env bash
# Training across emulated nodes (tests/cluster/emulated_cluster.sh: network namespaces, tc tbf
# per node and direction): drtrain's step with and without --overlap, with --wire fp32 and
# bf16, --overlap with --shard-plan striped (a second table), next to PyTorch DDP (gloo, PyPI's torch from bench/peers/make_venv.sh) on the same nodes,
# and to the workers' MPI_Allreduce of the gradient (drt_bench_exchange), all in one run per
# layout. Needs root; run after a build.
#
#   bench/cluster_train.sh [BUILD_DIR] [RATE] [MODELS]      e.g. bench/cluster_train.sh build 1gbit "mlp:784-4096-4096-10 cnn"
#
# Layouts (DRT_BENCH_LAYOUTS to choose; default all four):
#   dedicated-4+4   8 nodes, 1 rank each: PS on nodes 1-4, workers on nodes 5-8
#   dedicated-2+2   4 nodes, 1 rank each: PS on nodes 1-2, workers on nodes 3-4
#   dedicated-1+2   3 nodes, 1 rank each: the PS on node 1, workers on nodes 2-3 (not by default)
#   colocated-4x2   4 nodes, 2 ranks each, --ps-placement per-node (a PS and a worker per node)
#   colocated-2x2   2 nodes, 2 ranks each, --ps-placement per-node
# Every configuration: per-worker batch 64 (DRT_BENCH_BATCH), synthetic data, 1 BLAS thread per rank, SGD momentum
# 0.9. drtrain runs --max-steps 25 with --log-every 5: the figures are the means of the last four
# records (steps 6-25; the first record holds the start-up). Its metrics give, per step, the
# compute (forward + backward) and the exposed exchange (what the training loop waited for); in
# the sequential step (--overlap false) these are "compute alone" and "exchange alone" measured
# in the same job. DDP: 5 warm-up and 20 timed steps (bench/peers/torch_train.py), one rank per
# worker node (the first W nodes). Every rank sets mpi_yield_when_idle: the emulated nodes share
# this machine's cores (on a real cluster each node has its own).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rate=${2:-1gbit}
models=${3:-"mlp:784-4096-4096-10 cnn"}
layouts=${DRT_BENCH_LAYOUTS:-"dedicated-4+4 dedicated-2+2 colocated-4x2 colocated-2x2"}
[ -x "$build/bin/drtrain" ] || { echo "cluster_train: $build/bin/drtrain not built" >&2; exit 1; }
py=${DRT_PEER_PYTHON:-$("$root/bench/peers/make_venv.sh")}
out=${DRT_BENCH_OUT:-$(mktemp -d /tmp/drt_cluster_train.XXXXXX)}
mkdir -p "$out"

inner=$out/inner.sh
cat > "$inner" <<EOF
#!/usr/bin/env bash
# runs on node 1: NAME PPN PS PLACEMENT WORKERS MODEL
set -uo pipefail
export OMPI_MCA_mpi_yield_when_idle=1
name=\$1 ppn=\$2 ps=\$3 placement=\$4 workers=\$5 model=\$6
tag=\$(echo "\$model" | tr ':' '_')
batch=\$((${DRT_BENCH_BATCH:-64} * workers))
run() {  # LABEL drtrain flags...
  local label=\$1; shift
  "$root/tests/cluster/cluster_mpirun.sh" openmpi --ppn "\$ppn" -- "$build/bin/drtrain" --num-ps "\$ps" \\
    --ps-placement "\$placement" --model "\$model" --dataset synthetic --synthetic-train 4096 --synthetic-test 64 \\
    --batch-size "\$batch" --epochs 1000 --threads 1 --eval false --max-steps 25 --log-every 5 --lr 0.01 --momentum 0.9 \\
    --metrics "$out/\$name-\$tag-\$label.jsonl" "\$@" > "$out/\$name-\$tag-\$label.log" 2>&1 \\
    || echo "drtrain \$label failed: $out/\$name-\$tag-\$label.log" >&2
}
run seq-fp32 --overlap false
run overlap-fp32 --overlap true
run seq-bf16 --overlap false --wire bf16
run overlap-bf16 --overlap true --wire bf16
run overlap-fp32-striped --overlap true --shard-plan striped
run overlap-bf16-striped --overlap true --wire bf16 --shard-plan striped
# The workers' MPI_Allreduce of the gradient (rounded to whole MiB) and the bare exchange, same ranks
mib=\$(sed -n 's/^model .*parameters, \([0-9.]*\) MiB).*/\1/p' "$out/\$name-\$tag-seq-fp32.log" | awk '{printf "%d", \$1 + 0.5}')
[ "\${mib:-0}" -ge 1 ] && "$root/tests/cluster/cluster_mpirun.sh" openmpi --ppn "\$ppn" -- "$build/bin/drt_bench_exchange" \
  --num-ps "\$ps" --ps-placement "\$placement" --sizes-mib "\$mib" --schemes passive,passive-bf16 --iters 5 --warmup 1 \
  > "$out/\$name-\$tag-allreduce.log" 2>&1 || echo "drt_bench_exchange failed: $out/\$name-\$tag-allreduce.log" >&2
# PyTorch DDP, one rank per node on the first W nodes (OMPI_MCA_* reach every rank)
"$root/tests/cluster/cluster_mpirun.sh" openmpi --ppn 1 --nodes "\$workers" -- env OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 \\
  "$py" "$root/bench/peers/torch_train.py" --model "\$model" --dataset synthetic --synthetic-train 4096 \\
  --batch-size "\$batch" --threads 1 --steps 20 --warmup 5 --lr 0.01 --rendezvous tcp://10.231.0.1:29500 \\
  > "$out/\$name-\$tag-ddp.log" 2>&1 || echo "DDP failed: $out/\$name-\$tag-ddp.log" >&2
EOF
chmod +x "$inner"

for layout in $layouts; do
  case $layout in
    dedicated-4+4) nodes=8 ppn=1 ps=4 placement=first workers=4 ;;
    dedicated-2+2) nodes=4 ppn=1 ps=2 placement=first workers=2 ;;
    dedicated-1+2) nodes=3 ppn=1 ps=1 placement=first workers=2 ;;
    colocated-4x2) nodes=4 ppn=2 ps=4 placement=per-node workers=4 ;;
    colocated-2x2) nodes=2 ppn=2 ps=2 placement=per-node workers=2 ;;
    *) echo "cluster_train: unknown layout $layout" >&2; exit 1 ;;
  esac
  for model in $models; do
    echo "== $layout, $model, $rate" >&2
    "$root/tests/cluster/emulated_cluster.sh" --nodes "$nodes" --rate "$rate" -- \
      "$inner" "$layout" "$ppn" "$ps" "$placement" "$workers" "$model" || echo "   cluster failed" >&2
  done
done

# One table row per layout and model.
"$py" - "$out" "$layouts" "$models" "${DRT_BENCH_BATCH:-64}" <<'PY'
import glob, json, os, sys
out, layouts, models = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
per_worker = int(sys.argv[4])

def drtrain(path):
    try:
        recs = [json.loads(l) for l in open(path) if '"ms_per_step"' in l][1:]
    except OSError:
        return None
    if not recs:
        return None
    mean = lambda xs: sum(xs) / len(xs)
    sps = mean([r["samples_per_s"] for r in recs])
    return {"samples_per_s": sps, "compute_ms": mean([r["ms_per_step"]["compute"] for r in recs]),
            "exposed_ms": mean([r["ms_per_step"]["exposed_exchange"] for r in recs]),
            "step_ms": mean([r["step_ms"]["median"] for r in recs])}

def bench(path):
    try:
        for l in open(path):
            if l.startswith('{"bench"'):
                row = json.loads(l)["rows"][0]
                return row
    except (OSError, KeyError, IndexError):
        pass
    return None

def ddp(path):
    try:
        for l in open(path):
            if l.startswith('{"peer"'):
                return json.loads(l)
    except OSError:
        pass
    return None

print("| layout | model | seq fp32 ms | overlap fp32 ms | seq bf16 ms | overlap bf16 ms | compute alone ms | "
      "exchange alone fp32 / bf16 ms | overlap / max(compute, exchange) | overlap / seq | bf16 exchange / fp32 | "
      "DDP ms | drtrain best / DDP samples/s | MPI_Allreduce ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for layout in layouts:
    for model in models:
        tag = model.replace(":", "_")
        r = {k: drtrain(f"{out}/{layout}-{tag}-{k}.jsonl") for k in ("seq-fp32", "overlap-fp32", "seq-bf16", "overlap-bf16")}
        d = ddp(f"{out}/{layout}-{tag}-ddp.log")
        b = bench(f"{out}/{layout}-{tag}-allreduce.log")
        if any(v is None for v in r.values()):
            print(f"| {layout} | {model} | (failed: see {out}) |")
            continue
        workers = int(layout.split("-")[1][-1] if "+" in layout else layout.split("-")[1][0])  # 4+4, 1+2, 4x2
        ms = {k: 1e3 * per_worker * workers / v["samples_per_s"] for k, v in r.items()}
        compute, x32, x16 = r["seq-fp32"]["compute_ms"], r["seq-fp32"]["exposed_ms"], r["seq-bf16"]["exposed_ms"]
        best = max(v["samples_per_s"] for v in r.values())
        ddp_ms = d["step_ms"] if d else float("nan")
        ddp_sps = d["samples_per_s"] if d else float("nan")
        print(f"| {layout} | {model} | {ms['seq-fp32']:.0f} | {ms['overlap-fp32']:.0f} | {ms['seq-bf16']:.0f} | "
              f"{ms['overlap-bf16']:.0f} | {compute:.0f} | {x32:.0f} / {x16:.0f} | "
              f"{ms['overlap-fp32'] / max(compute, x32):.2f} | {ms['overlap-fp32'] / ms['seq-fp32']:.2f} | "
              f"{x16 / x32:.2f} | {ddp_ms:.0f} | {best / ddp_sps:.2f} | "
              f"{b['allreduce_ms'] if b else float('nan'):.0f} |")

# The striped shard plan (--shard-plan striped: every layer spread over every PS) with --overlap.
print("\n| layout | model | overlap striped fp32 ms | overlap striped bf16 ms | striped / contiguous overlap fp32 | "
      "striped / contiguous overlap bf16 | overlap striped fp32 / seq fp32 | overlap striped fp32 / max(compute, exchange) |")
print("|---|---|---|---|---|---|---|---|")
for layout in layouts:
    for model in models:
        tag = model.replace(":", "_")
        keys = ("seq-fp32", "overlap-fp32", "seq-bf16", "overlap-bf16", "overlap-fp32-striped", "overlap-bf16-striped")
        r = {k: drtrain(f"{out}/{layout}-{tag}-{k}.jsonl") for k in keys}
        if any(v is None for v in r.values()):
            print(f"| {layout} | {model} | (failed: see {out}) |")
            continue
        ms = {k: 1e3 / v["samples_per_s"] for k, v in r.items()}  # ratios only: the batch cancels
        compute, x32 = r["seq-fp32"]["compute_ms"], r["seq-fp32"]["exposed_ms"]
        workers = int(layout.split("-")[1][-1] if "+" in layout else layout.split("-")[1][0])
        step = 1e3 * per_worker * workers / r["overlap-fp32-striped"]["samples_per_s"]
        step16 = 1e3 * per_worker * workers / r["overlap-bf16-striped"]["samples_per_s"]
        print(f"| {layout} | {model} | {step:.0f} | {step16:.0f} | "
              f"{ms['overlap-fp32-striped'] / ms['overlap-fp32']:.2f} | {ms['overlap-bf16-striped'] / ms['overlap-bf16']:.2f} | "
              f"{ms['overlap-fp32-striped'] / ms['seq-fp32']:.2f} | {step / max(compute, x32):.2f} |")
print(f"\nlogs and metrics in {out}")
PY
