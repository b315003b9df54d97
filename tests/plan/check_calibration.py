#!/usr/bin/env python3
"""plan.calibration: drtrain-plan's prediction for every recorded calibration point
(bench/calibration/exchange_points.jsonl: times drt_bench_exchange measured on the emulated cluster
and simulated on SimGrid) and the ratio predicted / measured. A point the model claims to describe
("faithful": the scheme and testbed are modelled, docs/PLANNER.md) fails the test when the ratio is
outside 1 +- TOLERANCE; the others are printed with the reason they are not checked.

  check_calibration.py DRTRAIN_PLAN POINTS [--tolerance 0.15] [--markdown]

--markdown also prints the table of bench/calibration/README.md: per layout, size and scheme, the
emulated cluster's time, SimGrid's, the model's, and their ratios."""
import argparse
import json
import subprocess
import sys

# Schemes and testbeds whose mechanism the model does not describe, and why (docs/PLANNER.md,
# "Calibration": the departures are measured there).
SMPI_BLOCKING = "SMPI completes each RMA call before it returns (no push/pull pipelining)"
NOT_MODELLED = {
    ("smpi", "passive"): SMPI_BLOCKING,
    ("smpi", "ordered"): SMPI_BLOCKING,
    ("smpi", "passive-det"): SMPI_BLOCKING,
    ("smpi", "passive-bf16"): SMPI_BLOCKING,
    ("emulated", "fence"): "several workers into one PS node at once over tc tbf: 1.1-2.0x the model",
    ("emulated", "allreduce"): "Open MPI's allreduce over TCP on tbf links: 1.5-2.1x the ring floor",
}


def why_not_modelled(p):
    if p["scheme"] == "fence" and p["placement"] == "colocated":
        return "fence with co-located PS: up to 1.8x (emulated) and 5.4x (SimGrid, 64 nodes) the model"
    if p["scheme"] == "fence" and p.get("leaf_size", 0) > 0 and p["nodes"] >= 16 and p.get("compute", True):
        return ("fence on SimGrid's fat trees of 16+ nodes with the ranks' CPU time simulated: 1.15-2.6x the model "
                "(one switch, or --no-compute: 0.92-1.01)")
    if p["scheme"] == "fence" and p["nodes"] > 256:
        return "fence beyond 256 nodes: 1.2x the model at 512 on SimGrid (not explained)"
    return NOT_MODELLED.get((p["testbed"], p["scheme"])) or p.get("not_checked")


def predict(plan, p):
    scheme = {"passive-bf16": "passive", "ordered": "passive", "passive-det": "passive"}.get(p["scheme"], p["scheme"])
    args = [plan, "--testbed", p["testbed"], "--params", str(p["mib"] * 1024 * 1024 // 4), "--nodes", str(p["nodes"]),
            "--gbit", str(p["gbit"]), "--lat-us", str(p["lat_us"]), "--leaf-size", str(p.get("leaf_size", 0)), "--ps", str(p["ps"]),
            "--placement", p["placement"], "--chunk-kib", str(p["chunk_kib"]), "--json", "--top", "1000"]
    if p["scheme"] == "passive-bf16":
        args += ["--wire", "bf16"]
    if not p.get("compute", True):
        # --no-compute: the simulator charges nothing for the ranks' calls and their apply
        args += ["--rma-op-us", "0", "--apply-gbs", "1e6"]
    rows = [json.loads(l) for l in subprocess.run(args, check=True, capture_output=True, text=True).stdout.splitlines()]
    for r in rows[:-1]:
        if scheme == "allreduce":
            return r["ring_ms"], "link"
        if r["scheme"] == scheme:
            return r["ms"], r["bound"]
    raise RuntimeError(f"drtrain-plan gave no {scheme} row for {p}")


def markdown(plan, points):
    """Emulated vs SimGrid, each beside the model of its testbed, joined on layout, rate, size and scheme."""
    key = lambda p: (p["placement"], p["ps"], p["workers"], p["gbit"], p["mib"], p["scheme"], p.get("compute", True),
                     p.get("leaf_size", 0) > 0)
    by = {}
    for p in points:
        by.setdefault(key(p), {})[p["testbed"]] = p
    print("\n| layout | Gbit/s | MiB | scheme | emulated ms | model | SMPI ms | model | SMPI / emulated |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for k in sorted(by):
        cells = []
        for bed in ("emulated", "smpi"):
            p = by[k].get(bed)
            if p is None:
                cells += ["-", "-"]
                continue
            ms, _ = predict(plan, p)
            mark = "" if why_not_modelled(p) else " ✓"
            cells += [f"{p['measured_ms']:.1f}", f"{ms:.1f} ({ms / p['measured_ms']:.2f}){mark}"]
        e, m = by[k].get("emulated"), by[k].get("smpi")
        ratio = f"{m['measured_ms'] / e['measured_ms']:.2f}" if e and m else "-"
        layout = f"dedicated {k[1]} + {k[2]}" if k[0] == "dedicated" else f"co-located {k[2]} x 2"
        layout += ("" if k[6] else ", no compute") + (", fat tree" if k[7] else "")
        print(f"| {layout} | {k[3]:g} | {k[4]} | {k[5]} | {' | '.join(cells)} | {ratio} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan")
    ap.add_argument("points")
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    points = [json.loads(l) for l in open(args.points) if l.strip()]
    if not points:
        sys.exit("check_calibration: no points")
    bad, checked = [], 0
    print(f"{'testbed':9} {'layout':10} {'PS':>3} {'W':>3} {'Gbit':>5} {'MiB':>4} {'scheme':13} {'measured':>9} "
          f"{'model':>9} {'ratio':>6}  checked")
    for p in points:
        ms, bound = predict(args.plan, p)
        ratio = ms / p["measured_ms"]
        why_not = why_not_modelled(p)
        ok = why_not or abs(ratio - 1) <= args.tolerance
        checked += not why_not
        print(f"{p['testbed']:9} {p['placement']:10} {p['ps']:3} {p['workers']:3} {p['gbit']:5g} {p['mib']:4} "
              f"{p['scheme']:13} {p['measured_ms']:9.1f} {ms:9.1f} {ratio:6.2f}  "
              f"{'no: ' + why_not if why_not else ('yes' if ok else 'FAILS')} ({bound})")
        if not ok:
            bad.append(p)
    print(f"\n{checked} points checked, {len(bad)} outside 1 +- {args.tolerance}")
    if args.markdown:
        markdown(args.plan, points)
    sys.exit(1 if bad or checked == 0 else 0)


if __name__ == "__main__":
    main()
