#!/usr/bin/python3
"""A short run with --timeline, --metrics and checkpoints (1 PS + 2 workers), then checks:
the trace is valid Chrome-trace JSON with one named track per rank and the expected spans on
each (workers: data wait, forward, backward, tower combine, push, ps wait, pull, evaluation;
PS: ps wait, ps apply, checkpoint), the metrics records carry the per-worker step statistics,
and scripts/plot_metrics.py turns the metrics into a PNG.

usage: check_timeline.py --bin BUILD/bin --mpiexec "mpiexec ..." --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER_SPANS = {"data wait", "forward", "backward", "tower combine", "push", "ps wait", "pull", "evaluation"}
PS_SPANS = {"ps wait", "ps apply", "checkpoint"}


def fail(message):
    sys.exit(f"FAIL: {message}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    trace, metrics = os.path.join(a.work, "trace.json"), os.path.join(a.work, "metrics.jsonl")
    cmd = a.mpiexec.split() + ["-n", "3", os.path.join(a.bin, "drtrain"), "--num-ps", "1", "--max-steps", "40",
                               "--log-every", "10", "--timeline", trace, "--metrics", metrics, "--checkpoint-dir",
                               os.path.join(a.work, "ckpt"), "--checkpoint-every", "20"]
    run = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        fail("drtrain failed")
    with open(trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    if sorted(names) != [0, 1, 2] or not names[0].startswith("PS 0") or not names[1].startswith("worker 0"):
        fail(f"tracks: {names}")
    spans = {tid: set() for tid in names}
    for e in events:
        if e["ph"] != "X":
            continue
        if e["dur"] < 0 or e["ts"] < 0 or e["tid"] not in names:
            fail(f"bad span {e}")
        spans[e["tid"]].add(e["name"])
    if not PS_SPANS <= spans[0]:
        fail(f"PS track lacks {PS_SPANS - spans[0]}")
    for tid in (1, 2):
        if not WORKER_SPANS <= spans[tid]:
            fail(f"worker track {tid} lacks {WORKER_SPANS - spans[tid]}")
    steps = [e for e in events if e["ph"] == "X" and e["tid"] == 1 and e["name"] == "forward"]
    if len(steps) != 40 or any(b["ts"] < a["ts"] for a, b in zip(steps, steps[1:])):
        fail("worker 0 should show 40 forward spans in time order")
    records = [json.loads(line) for line in open(metrics)]
    stats = [r["step_ms"] for r in records if "step_ms" in r]
    if len(stats) != 4 or any(not (0 < s["median"] <= s["p90"] <= s["max"]) or s["slowest_worker"] not in (0, 1)
                              for s in stats):
        fail(f"step statistics: {stats}")
    png = os.path.join(a.work, "metrics.png")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "plot_metrics.py"), metrics, png], check=True)
    with open(png, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            fail("plot_metrics.py did not write a PNG")
    print(f"ok: {len(events)} trace events on 3 tracks, {len(stats)} step-statistics records, {png}")


if __name__ == "__main__":
    main()
