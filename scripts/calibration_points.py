#!/usr/bin/env python3
"""Collects drt_bench_exchange's JSON lines (one per run: bench/cluster_exchange.sh's logs, or
bench/smpi_exchange.sh's output) into calibration points for the exchange model: one point per
run, gradient size and scheme (the workers' allreduce included), with the testbed and latency they
were measured at. tests/plan/check_calibration.py compares drtrain-plan's predictions with them.

  python3 scripts/calibration_points.py --testbed emulated --lat-us 10 LOG... >> points.jsonl

A run with as many nodes as ranks is the dedicated layout; fewer nodes: co-located (per-node).
--cpu-only DIR: the same layouts with unlimited links (cluster_exchange.sh's rate "none", logs
LAYOUT-none.log beside LAYOUT-RATE.log): each point records the exchange's CPU-only time, and a
point whose link floor is under 3x it is marked not checked (the shared CPUs, not the links, bind)."""
import argparse
import json
import os
import sys


def bench_line(path):
    lines = [l for l in open(path) if l.startswith('{"bench":"exchange"')]
    if not lines:
        sys.exit(f"calibration_points: no bench JSON line in {path}")
    return json.loads(lines[-1])


def cpu_only_times(log, cpu_dir):
    """{(mib, scheme): ms} from LAYOUT-none.log in cpu_dir, for LAYOUT-RATE.log."""
    if not cpu_dir:
        return {}
    layout = os.path.basename(log).rsplit("-", 1)[0]
    path = os.path.join(cpu_dir, layout + "-none.log")
    if not os.path.exists(path):
        sys.exit(f"calibration_points: no {path} for --cpu-only")
    times = {}
    for row in bench_line(path)["rows"]:
        times[(row["mib"], "allreduce")] = row["allreduce_ms"]
        for scheme, ms in row["exchange_ms"].items():
            times[(row["mib"], scheme)] = ms
    return times


def fat_tree_leaf(nodes):
    """The leaf size scripts/smpi_platform.py gives a fat tree of `nodes` hosts."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import smpi_platform
    return smpi_platform.leaf_size(nodes)


def points(run, testbed, lat_us, source, cpu_only, fat_tree=False, compute=True):
    placement = "dedicated" if run["nodes"] == run["ps"] + run["workers"] else "colocated"
    for row in run["rows"]:
        if not row.get("link_gbit"):
            continue  # unlimited links: no rate to predict at (the CPU-only time, kept in the logs)
        base = {"testbed": testbed, "placement": placement, "nodes": run["nodes"], "ps": run["ps"],
                "workers": run["workers"], "chunk_kib": run["chunk_kib"], "gbit": row["link_gbit"],
                "lat_us": lat_us, "mib": row["mib"], "source": source,
                "leaf_size": fat_tree_leaf(run["nodes"]) if fat_tree else 0}
        if not compute:
            base["compute"] = False  # smpi_exchange.sh --no-compute: the ranks' CPU time not simulated
        measured = dict(row["exchange_ms"], allreduce=row["allreduce_ms"])
        for scheme, ms in measured.items():
            p = dict(base, scheme=scheme, measured_ms=round(ms, 3))
            cpu = cpu_only.get((row["mib"], scheme))
            if cpu_only and cpu is None:
                p["not_checked"] = f"no CPU-only measurement of {row['mib']} MiB to tell whether the links bind"
            if cpu is not None:
                p["cpu_only_ms"] = round(cpu, 3)
                floor = row["link_floor_ms"] * (0.5 if scheme.endswith("bf16") else 1.0)
                if floor < 3 * cpu:
                    p["not_checked"] = (f"CPU-bound: the link floor {floor:.0f} ms is under 3x the exchange's "
                                        f"CPU-only time {cpu:.0f} ms")
            yield p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--testbed", required=True, choices=["emulated", "smpi"])
    ap.add_argument("--lat-us", type=float, required=True, help="the one-way latency the runs had")
    ap.add_argument("--source", default="", help="the command that measured them (kept with each point)")
    ap.add_argument("--cpu-only", metavar="DIR", help="the same layouts' logs with unlimited links")
    ap.add_argument("--fat-tree", action="store_true",
                    help="the runs were on scripts/smpi_platform.py's fat trees (not --flat): record their leaf size")
    ap.add_argument("--no-compute", action="store_true",
                    help="the runs were bench/smpi_exchange.sh --no-compute (the ranks' CPU time not simulated)")
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args()
    for path in args.logs:
        for p in points(bench_line(path), args.testbed, args.lat_us, args.source, cpu_only_times(path, args.cpu_only),
                        args.fat_tree, not args.no_compute):
            print(json.dumps(p))


if __name__ == "__main__":
    main()
