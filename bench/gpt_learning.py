#!/usr/bin/env python3
"""Does drtrain's GPT learn like PyTorch's? The same small GPT, the same initial weights, the same
windows in the same order, the same optimizer: the validation loss of both after the same tokens.

  1. drtrain (mpiexec, 1 PS + 2 workers by default) trains --model on the token file from scratch
     with --checkpoint-start (its initial weights, ckpt-00000000.h5) and evaluates every
     --eval-every steps on the first --test-windows windows of /test (--metrics);
  2. PyTorch (float32, the venv of bench/peers/make_venv.sh) loads those initial weights into
     nanoGPT's model (bench/peers/torch_gpt.py), takes every step's windows from `drtrain-data
     plan` (what drtrain took), applies AdamW with the same decay rule, warm-up, cosine decay and
     global-norm clipping, and evaluates the same windows at the same steps;
  3. prints both curves, the largest difference of the validation losses, and writes a JSON
     record and a plot (matplotlib, when Debian's python3-matplotlib is there).

Dropout is off in both (the preset's default): drtrain's masks are not torch's (torch_gpt.py can
reproduce them, for the float64 equality test, at a cost that does not fit a learning run).

usage (from the repository root, after a build and scripts/make_text_corpus.sh):
  PY=$(bench/peers/make_venv.sh)
  $PY bench/gpt_learning.py --steps 300 --out build/gpt-learning      # ~15 min on 2 cores
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
import torch_gpt  # noqa: E402  (bench/peers/torch_gpt.py)


def run_drtrain(a, work):
    ckpt = os.path.join(work, "ckpt")
    metrics = os.path.join(work, "drtrain.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run(["rm", "-rf", ckpt], check=True)
    cmd = a.mpiexec.split() + ["-n", str(1 + a.workers), os.path.join(a.bin, "drtrain"), "--num-ps", "1",
                               "--dataset", "hdf5", "--data-file", a.data, "--context", str(a.context),
                               "--model", a.model, "--batch-size", str(a.batch), "--max-steps", str(a.steps),
                               "--epochs", "1000", "--optimizer", "adamw", "--lr", str(a.lr), "--beta2",
                               str(a.beta2), "--weight-decay", str(a.weight_decay), "--decay-rule", "matrices",
                               "--lr-schedule", "cosine", "--warmup-steps", str(a.warmup), "--min-lr",
                               str(a.min_lr), "--grad-clip", str(a.grad_clip), "--seed", str(a.seed),
                               "--checkpoint-dir", ckpt, "--checkpoint-start", "--eval-every", str(a.eval_every),
                               "--test-samples", str(a.test_windows), "--metrics", metrics, "--log-every",
                               str(a.eval_every)]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(p.stdout)
        raise SystemExit(f"drtrain failed ({p.returncode}): {' '.join(cmd)}")
    curve = {}
    for line in open(metrics):
        r = json.loads(line)
        if r.get("eval") and r["step"] > 0:
            curve[int(r["step"])] = float(r["test_loss"])
    return os.path.join(ckpt, "ckpt-00000000.h5"), curve, time.time() - t0, " ".join(cmd)


def run_torch(a, init):
    import torch
    torch.set_num_threads(a.threads)
    ck = torch_gpt.read_checkpoint(init)
    cfg = torch_gpt.config_from_checkpoint(ck)
    model = torch_gpt.build_model(cfg)  # float32
    model.attention = "sdpa"
    torch_gpt.load_params(model, ck["params"])
    seed = int(ck["attrs"]["seed"])
    opt = torch_gpt.make_adamw(model, a.lr, (0.9, a.beta2), 1e-8, a.weight_decay, "matrices")
    train = torch_gpt.TokenWindows(a.data, a.context)
    test = torch_gpt.TokenWindows(a.data, a.context, split="test")
    tool = os.path.join(a.bin, "drtrain-data")
    plan = torch_gpt.read_plan(tool, a.data, a.context, a.batch, seed, a.steps)
    eval_x, eval_y = (torch.from_numpy(t) for t in test.batch(list(range(min(a.test_windows, test.count)))))

    def evaluate():
        model.eval()
        with torch.no_grad():
            total = 0.0
            for i in range(0, eval_x.shape[0], 32):
                _, loss = model(eval_x[i:i + 32], eval_y[i:i + 32])
                total += float(loss) * eval_x[i:i + 32].shape[0]
        model.train()
        return total / eval_x.shape[0]

    curve = {}
    model.train()
    t0 = time.time()
    for step, samples in enumerate(plan):
        x, y = (torch.from_numpy(t) for t in train.batch(samples))
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        lr = torch_gpt.lr_at(a.lr, step, "cosine", a.warmup, a.steps, a.min_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            curve[step + 1] = evaluate()
    return curve, time.time() - t0


def plot(path, d, t, a):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = sorted(d)
    tokens = [s * a.batch * a.context / 1e6 for s in steps]
    ax.plot(tokens, [d[s] for s in steps], "o-", label="drtrain (1 PS + %d workers)" % a.workers)
    ax.plot(tokens, [t[s] for s in steps], "s--", label="PyTorch float32 (nanoGPT's model)")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("validation loss (nats per token)")
    ax.set_title(f"{a.model}, context {a.context}, Python docs (bytes)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def plot_only(path):
    """--plot JSON: draws a run's learning.json (Debian's python3 has matplotlib; the venv need not)."""
    r = json.load(open(path))
    a = argparse.Namespace(**{k: r[k] for k in ("model", "context", "batch", "workers")})
    d = {int(k): v for k, v in r["drtrain_val_loss"].items()}
    t = {int(k): v for k, v in r["pytorch_val_loss"].items()}
    png = os.path.splitext(path)[0] + ".png"
    print(f"plot {png}" if plot(png, d, t, a) else "no matplotlib")
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--plot":
        return plot_only(sys.argv[2])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--data", default=os.path.join(ROOT, "build", "data", "pydoc.h5"))
    p.add_argument("--mpiexec", default="mpiexec --oversubscribe --allow-run-as-root")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "gpt-learning"))
    p.add_argument("--model", default="gpt:6-6-384")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=8, help="global batch (windows)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--test-windows", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2, help="PyTorch's threads")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    init, d, d_s, cmd = run_drtrain(a, a.out)
    t, t_s = run_torch(a, init)
    rows = [(s, d[s], t[s], d[s] - t[s]) for s in sorted(d) if s in t]
    print(f"{'step':>6} {'tokens':>10} {'drtrain':>9} {'pytorch':>9} {'diff':>8}")
    for s, x, y, z in rows:
        print(f"{s:6d} {s * a.batch * a.context:10d} {x:9.4f} {y:9.4f} {z:+8.4f}")
    worst = max(abs(z) for *_, z in rows)
    final = rows[-1]
    record = {"model": a.model, "context": a.context, "batch": a.batch, "steps": a.steps, "workers": a.workers,
              "drtrain_val_loss": d, "pytorch_val_loss": t, "max_abs_diff": worst,
              "final_diff": final[3], "drtrain_s": d_s, "pytorch_s": t_s, "drtrain_command": cmd}
    with open(os.path.join(a.out, "learning.json"), "w") as f:
        json.dump(record, f, indent=1)
    png = os.path.join(a.out, "learning.png")
    print(f"largest |drtrain - pytorch| validation loss: {worst:.4f} nats (final {final[3]:+.4f}); "
          f"drtrain {d_s:.0f} s, pytorch {t_s:.0f} s")
    if not plot(png, d, t, a):
        subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--plot", os.path.join(a.out, "learning.json")])
    return 0 if worst <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
