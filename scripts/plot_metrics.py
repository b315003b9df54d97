#!/usr/bin/python3
"""Turns drtrain's --metrics JSON lines into PNG curves.

usage: scripts/plot_metrics.py METRICS.jsonl [OUT.png]      (default: METRICS.png)

Four panels against the training step: training loss (and test loss at each evaluation),
accuracy (training and test), samples/s, and milliseconds per step in each phase (stacked:
data, compute, tower combine, push, PS wait and apply, pull). Needs matplotlib (Debian:
python3-matplotlib); run with /usr/bin/python3.

A resumed run appends to its metrics file, each record tagged with its run segment: the plot
shows the whole history, and where segments repeat steps (a requeued job resumes from its last
checkpoint, before its stop) the later segment's records win; each resume is a dotted line.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ["data", "compute", "tower_combine", "push", "ps_wait_apply", "pull"]


def read_history(src):
    """The file's records in step order; of records of the same kind at the same step, the one of
    the latest segment (a resumed run repeats the steps after its checkpoint)."""
    latest = {}
    order = []
    with open(src) as f:
        for line in f:
            record = json.loads(line)
            kind = "summary" if record.get("summary") else "start" if record.get("start") else \
                "eval" if record.get("eval") else "progress"
            key = (kind, record.get("step"), record.get("epoch") if kind == "eval" else None)
            if kind in ("summary", "start"):
                key = (kind, record.get("segment", 0))
            if key not in latest:
                order.append(key)
            if key not in latest or record.get("segment", 0) >= latest[key].get("segment", 0):
                latest[key] = record
    return sorted((latest[k] for k in order), key=lambda r: (r.get("step") or 0, r.get("segment", 0)))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else src.rsplit(".", 1)[0] + ".png"
    records = read_history(src)
    train = [r for r in records if "ms_per_step" in r]
    evals = [r for r in records if r.get("eval") and r.get("test_loss") is not None]
    summary = next((r for r in reversed(records) if r.get("summary")), None)
    resumes = [r["step"] for r in records if r.get("start") and r.get("resumed_from")]
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
    for a in (ax[0][0], ax[0][1], ax[1][0]):
        for step in resumes:
            a.axvline(step, color="grey", linestyle=":", linewidth=1)
    ax[0][0].legend(fontsize="small", loc="best")
    ax[0][1].legend(fontsize="small", loc="best")
    # Beside the panel, not over the stacked areas it names.
    ax[1][1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if summary:
        accuracy = summary.get("test_accuracy")
        fig.suptitle(f"{summary['model']} on {summary['dataset']}: "
                     f"{'no test set' if accuracy is None else f'test accuracy {accuracy:.4f}'}, "
                     f"{summary['samples_per_s']:.0f} samples/s, {summary['ps']} PS + {summary['workers']} workers"
                     f"{f', {len(resumes) + 1} run segments' if resumes else ''}")
    fig.tight_layout()
    fig.savefig(out, dpi=80, bbox_inches="tight")  # keeps the legend beside the last panel
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
