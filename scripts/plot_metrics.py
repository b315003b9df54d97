#!/usr/bin/python3
"""Turns drtrain's --metrics JSON lines into PNG curves.

usage: scripts/plot_metrics.py METRICS.jsonl [OUT.png]      (default: METRICS.png)

Four panels against the training step: training loss (and test loss at each evaluation),
accuracy (training and test), samples/s, and milliseconds per step in each phase (stacked:
data, compute, tower combine, push, PS wait and apply, pull). Needs matplotlib (Debian:
python3-matplotlib); run with /usr/bin/python3.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ["data", "compute", "tower_combine", "push", "ps_wait_apply", "pull"]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else src.rsplit(".", 1)[0] + ".png"
    train, evals, summary = [], [], None
    with open(src) as f:
        for line in f:
            record = json.loads(line)
            if record.get("summary"):
                summary = record
            elif record.get("eval"):
                evals.append(record)
            elif "ms_per_step" in record:
                train.append(record)
    if not train:
        sys.exit(f"{src}: no progress records (was --metrics given to a run of more than --log-every steps?)")
    steps = [r["step"] for r in train]
    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    ax[0][0].plot(steps, [r["loss"] for r in train], label="train")
    ax[0][0].plot([e["step"] for e in evals], [e["test_loss"] for e in evals], "o-", label="test")
    ax[0][0].set(title="loss", xlabel="step")
    ax[0][1].plot(steps, [r["accuracy"] for r in train], label="train")
    ax[0][1].plot([e["step"] for e in evals], [e["test_accuracy"] for e in evals], "o-", label="test")
    ax[0][1].set(title="accuracy", xlabel="step")
    ax[1][0].plot(steps, [r["samples_per_s"] for r in train])
    ax[1][0].set(title="samples/s", xlabel="step")
    ax[1][1].stackplot(steps, *[[r["ms_per_step"].get(p, 0.0) for r in train] for p in PHASES], labels=PHASES)
    ax[1][1].set(title="ms per step by phase (max over workers)", xlabel="step")
    for a in (ax[0][0], ax[0][1], ax[1][1]):
        a.legend(fontsize="small")
    if summary:
        fig.suptitle(f"{summary['model']} on {summary['dataset']}: test accuracy {summary['test_accuracy']:.4f}, "
                     f"{summary['samples_per_s']:.0f} samples/s, {summary['ps']} PS + {summary['workers']} workers")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
