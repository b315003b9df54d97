#!/usr/bin/env bash
# The --sync-mode values across emulated nodes (tests/cluster/emulated_cluster.sh: network
# namespaces joined by a bridge, tc tbf per node and direction) with one worker slowed
# (--straggler 1:FACTOR): each mode must finish, and the table shows what it did (wall time,
# samples/s, accuracy, the mode's report). The relaxed protocol's read locks, versions and
# per-worker slots then travel over TCP (Open MPI's osc/pt2pt or MPICH's ch3 RMA), not shared
# memory. Needs root; run after a build (Open MPI in build/, or an MPICH build: pass its bin and
# `mpich`).
#
#   bench/cluster_sync_modes.sh [BIN_DIR] [openmpi|mpich] [NODES] [RATE]
#       e.g. bench/cluster_sync_modes.sh build/bin openmpi 3 1gbit
#
# NODES nodes with 2 ranks each, two layouts: a PS and a worker per node (--ps-placement
# per-node) and one PS for NODES x 2 - 1 workers. The Fashion-MNIST MLP, batch 240, lr 0.1,
# one epoch (250 steps), worker 1 slowed FACTOR x (DRT_BENCH_FACTOR, default 3). Modes:
# DRT_BENCH_MODES (default "sync async ssp:2 backup:1").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:-$root/build/bin}" && pwd)
mpi=${2:-openmpi}
nodes=${3:-3}
rate=${4:-1gbit}
modes=${DRT_BENCH_MODES:-"sync async ssp:2 backup:1"}
factor=${DRT_BENCH_FACTOR:-3}
[ -x "$bin/drtrain" ] || { echo "cluster_sync_modes: $bin/drtrain not built" >&2; exit 1; }
out=$(mktemp -d /tmp/drt_cluster_sync_modes.XXXXXX)

inner=$out/inner.sh
cat > "$inner" <<EOF
#!/usr/bin/env bash
# runs on node 1, inside the emulated cluster
set -uo pipefail
for mode in $modes; do
  for layout in per-node one-ps; do
    if [ \$layout = per-node ]; then placement=(--num-ps $nodes --ps-placement per-node)
    else placement=(--num-ps 1 --ps-placement first); fi
    name=\${mode//:/-}_\$layout
    echo "--- $mpi: --sync-mode \$mode, \$layout" >&2
    start=\$(date +%s.%N)
    timeout 600 "$root/tests/cluster/cluster_mpirun.sh" $mpi --ppn 2 -- "$bin/drtrain" "\${placement[@]}" \\
      --threads 1 --model mlp --dataset fashion-mnist --batch-size 240 --lr 0.1 --epochs 1 --eval-every 0 \\
      --sync-mode \$mode --straggler 1:$factor --hang-timeout 60 --log-every 50 --metrics "$out/\$name.jsonl" \\
      > "$out/\$name.log" 2>&1
    echo "\$? \$(echo "\$(date +%s.%N) - \$start" | bc)" > "$out/\$name.status"
  done
done
EOF
chmod +x "$inner"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "command: $0 $bin $mpi $nodes $rate (modes: $modes; straggler 1:$factor)"
"$root/tests/cluster/emulated_cluster.sh" --nodes "$nodes" --rate "$rate" -- "$inner"

/usr/bin/python3 - "$out" "$modes" "$mpi" "$nodes" <<'PY'
import json, os, sys
out, modes, mpi, nodes = sys.argv[1], sys.argv[2].split(), sys.argv[3], int(sys.argv[4])
print(f"\n| MPI | sync-mode | layout ({nodes} nodes x 2 ranks) | exit | launch to exit (s) | samples/s | "
      "test accuracy | the mode's report |")
print("|---|---|---|---:|---:|---:|---:|---|")
failed = 0
for mode in modes:
    for layout in ("per-node", "one-ps"):
        name = f"{mode.replace(':', '-')}_{layout}"
        status, secs = open(os.path.join(out, name + ".status")).read().split()
        failed += status != "0"
        report, s = "", {}
        try:
            s = [r for r in map(json.loads, filter(str.strip, open(os.path.join(out, name + ".jsonl"))))
                 if r.get("summary")][-1]
        except (OSError, IndexError):
            pass
        if "staleness_mean" in s:
            report = f"staleness mean {s['staleness_mean']:.2f}, max {s['staleness_max']}; look-ahead {s['lookahead']:.2f}"
            if "max_lead" in s:
                report += f"; max lead {s['max_lead']}"
        elif "dropped_steps" in s:
            report = f"dropped {s['dropped_steps']:.1f} steps' worth; skipped {s['skipped_steps']}"
        label = f"{nodes} PS + {nodes} workers" if layout == "per-node" else f"1 PS + {2 * nodes - 1} workers"
        print(f"| {mpi} | {mode} | {label} | {status} | {float(secs):.1f} | {s.get('samples_per_s', 0):.0f} | "
              f"{s.get('test_accuracy', float('nan')):.4f} | {report} |")
print(f"\nlogs: {out}")
sys.exit(1 if failed else 0)
PY
