#!/usr/bin/env python3
"""Training throughput of the small GPT on the CPU: drtrain against PyTorch, side by side.

The model is the recipe's (gpt:6-6-384, context 256, bytes of Python's documentation), AdamW with
gradient clipping, the same global batch of windows everywhere. Configurations, run in rounds
(round-robin, so that the machine's drift hits every one alike):

  drtrain        mpiexec: 1 PS + 2 workers (each worker one BLAS thread: the 2 cores split)
  torch t2       PyTorch (the venv of bench/peers/make_venv.sh), one process, 2 threads, eager,
                 fp32 / bf16 autocast, F.scaled_dot_product_attention
  torch ddp      PyTorch DDP over gloo, 2 processes x 1 thread, fp32 eager
  torch compile  torch.compile, fp32 and bf16 (round 1 only: compiling takes minutes here)

Each figure is tokens/s over timed steps after untimed warm-up steps (drtrain: its progress
intervals after the first, from --metrics). The summary gives each configuration's median over
the rounds, the best PyTorch single process and the ratios drtrain / best single process and
drtrain / DDP, and the peak resident memory per process.

usage (from the repository root, a quiet machine):
  PY=$(bench/peers/make_venv.sh)
  $PY bench/gpt_throughput.py --rounds 3 --out build/gpt-throughput
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def drtrain(a, round_):
    metrics = os.path.join(a.out, f"drtrain-{round_}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    steps = a.warmup + a.steps
    cmd = a.mpiexec.split() + ["-n", "3", os.path.join(a.bin, "drtrain"), "--num-ps", "1", "--dataset", "hdf5",
                               "--data-file", a.data, "--context", str(a.context), "--model", a.model,
                               "--batch-size", str(a.batch), "--max-steps", str(steps), "--epochs", "1000",
                               "--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.1",
                               "--grad-clip", "1.0", "--eval", "false", "--log-every", str(a.interval),
                               "--metrics", metrics] + a.drtrain_extra.split()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(p.stdout[-3000:])
        raise SystemExit(f"drtrain failed: {' '.join(cmd)}")
    records = [json.loads(x) for x in open(metrics)]
    intervals = [r for r in records if "tokens_per_s" in r and not r.get("summary") and not r.get("eval")]
    summary = [r for r in records if r.get("summary")][-1]
    timed = [r["tokens_per_s"] for r in intervals if r["step"] > a.warmup]
    return {"tokens_per_s": statistics.median(timed), "peak_rss_mib": summary["worker_peak_rss_mib"],
            "command": " ".join(cmd)}


def torch(a, name, flags):
    cmd = [sys.executable, os.path.join(HERE, "peers", "torch_gpt.py"), "train", "--data", a.data, "--context",
           str(a.context), "--model", a.model, "--batch-size", str(a.batch), "--steps", str(a.steps), "--warmup",
           str(a.warmup), "--lr", "1e-3", "--weight-decay", "0.1", "--grad-clip", "1.0",
           "--drtrain-data", os.path.join(a.bin, "drtrain-data")] + flags
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not lines:
        print(p.stdout[-2000:], p.stderr[-3000:])
        return None
    r = json.loads(lines[-1])
    return {"tokens_per_s": r["tokens_per_s"], "peak_rss_mib": r["peak_rss_mib"], "command": " ".join(cmd)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--data", default=os.path.join(ROOT, "build", "data", "pydoc.h5"))
    p.add_argument("--mpiexec", default="mpiexec --oversubscribe --allow-run-as-root --bind-to none")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "gpt-throughput"))
    p.add_argument("--model", default="gpt:6-6-384")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=8, help="global batch (windows)")
    p.add_argument("--steps", type=int, default=12, help="timed steps")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--interval", type=int, default=3, help="drtrain's progress interval (steps)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="also torch.compile (round 1; minutes to compile)")
    p.add_argument("--drtrain-extra", default="", help="more drtrain flags (e.g. '--overlap true')")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    configs = [("drtrain 1 PS + 2 workers", lambda r: drtrain(a, r)),
               ("torch 1 process, 2 threads, fp32", lambda r: torch(a, "fp32", ["--threads", "2"])),
               ("torch 1 process, 2 threads, bf16 autocast",
                lambda r: torch(a, "bf16", ["--threads", "2", "--precision", "bf16"])),
               ("torch DDP gloo, 2 x 1 thread, fp32", lambda r: torch(a, "ddp", ["--threads", "1", "--ranks", "2"]))]
    once = [("torch 1 process, 2 threads, fp32, compiled",
             lambda r: torch(a, "c32", ["--threads", "2", "--compile"])),
            ("torch 1 process, 2 threads, bf16 autocast, compiled",
             lambda r: torch(a, "c16", ["--threads", "2", "--precision", "bf16", "--compile"]))] if a.compile else []
    results = {name: [] for name, _ in configs + once}
    commands = {}
    for r in range(a.rounds):
        for name, run in configs + (once if r == 0 else []):
            t0 = time.time()
            res = run(r)
            if res:
                results[name].append(res)
                commands[name] = res["command"]
            print(f"round {r + 1} {name}: {res['tokens_per_s'] if res else float('nan'):.0f} tokens/s, "
                  f"peak RSS {res['peak_rss_mib'] if res else float('nan'):.0f} MiB ({time.time() - t0:.0f} s)",
                  flush=True)
    med = {n: statistics.median(x["tokens_per_s"] for x in v) for n, v in results.items() if v}
    rss = {n: max(x["peak_rss_mib"] for x in v) for n, v in results.items() if v}
    ours = med["drtrain 1 PS + 2 workers"]
    singles = {n: t for n, t in med.items() if n.startswith("torch 1 process")}
    best = max(singles, key=singles.get)
    ddp = med.get("torch DDP gloo, 2 x 1 thread, fp32")
    print("\nmedian tokens/s over rounds, peak RSS per process:")
    for n in med:
        print(f"  {n:55s} {med[n]:8.0f}  {rss[n]:7.0f} MiB")
    print(f"drtrain / best PyTorch single process ({best}): {ours / singles[best]:.3f}")
    if ddp:
        print(f"drtrain / PyTorch DDP: {ours / ddp:.3f}")
    print(f"drtrain worker RSS / PyTorch ({best}) RSS: {rss['drtrain 1 PS + 2 workers'] / rss[best]:.3f}")
    with open(os.path.join(a.out, "throughput.json"), "w") as f:
        json.dump({"median_tokens_per_s": med, "peak_rss_mib": rss, "rounds": {n: [x["tokens_per_s"] for x in v]
                   for n, v in results.items()}, "best_single": best, "ratio_best_single": ours / singles[best],
                   "ratio_ddp": ours / ddp if ddp else None, "commands": commands, "args": vars(a)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
