#!/usr/bin/env python3
"""drtrain-plan's predictions at scale (docs/PLANNER.md, "Scale"; bench/RESULTS.md, "Planning at
scale"): for a model size, link rates and node counts, the recommended configuration, its exchange
time, a ring allreduce over all the nodes, the link floor of that configuration, the bound, and the
throughput against the ring (workers / (compute + exchange) over nodes / (compute + ring)).
Prints a Markdown table.

  bench/plan_scale.py build/bin/drtrain-plan --params 124M --gbit 10,25,100 --nodes 8,16,128,1024 [--compute-ms C]"""
import argparse
import json
import subprocess


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan")
    ap.add_argument("--params", required=True)
    ap.add_argument("--gbit", default="10,25,100")
    ap.add_argument("--nodes", default="8,16,64,128,256,1024")
    ap.add_argument("--lat-us", default="4")
    ap.add_argument("--compute-ms", default="0")
    args = ap.parse_args()
    print("| params | Gbit/s | nodes | recommended | exchange ms | bound | ring over all nodes ms | "
          "throughput vs ring | best co-located P = N ms |")
    print("|---|---:|---:|---|---:|---|---:|---:|---:|")
    for gbit in args.gbit.split(","):
        for nodes in args.nodes.split(","):
            cmd = [args.plan, "--params", args.params, "--nodes", nodes, "--gbit", gbit, "--lat-us", args.lat_us,
                   "--compute-ms", args.compute_ms, "--json"]
            lines = [json.loads(l) for l in subprocess.run(cmd, check=True, capture_output=True,
                                                           text=True).stdout.splitlines()]
            rows, last = lines[:-1], lines[-1]
            best = rows[0]
            full = [r for r in rows if r["placement"] == "colocated" and r["ps"] == int(nodes)]
            full_ms = min(r["ms"] for r in full) if full else float("nan")
            print(f"| {args.params} | {gbit} | {nodes} | `{last['best']}` | {best['ms']:.2f} | {best['bound']} | "
                  f"{last['ring_ms']:.2f} | {best['throughput']:.2f} | {full_ms:.2f} |")


if __name__ == "__main__":
    main()
