#!/usr/bin/python3
"""Reads a drtrain checkpoint with h5py and checks every field of docs/CHECKPOINT_FORMAT.md,
recomputing the content checksum independently with numpy.

usage: check_checkpoint.py FILE MODEL          (MODEL: mlp or cnn)
Exit status 0 when everything is there and consistent; prints what is wrong otherwise.
"""
import sys

import h5py
import numpy as np

MODELS = {
    "mlp": [("fc1.weight", (512, 784)), ("fc1.bias", (512,)), ("fc2.weight", (256, 512)), ("fc2.bias", (256,)),
            ("fc3.weight", (10, 256)), ("fc3.bias", (10,))],
    "cnn": [("conv1.weight", (32, 1, 5, 5)), ("conv1.bias", (32,)), ("conv2.weight", (64, 32, 5, 5)),
            ("conv2.bias", (64,)), ("fc1.weight", (512, 3136)), ("fc1.bias", (512,)), ("fc2.weight", (10, 512)),
            ("fc2.bias", (10,))],
}
INTS = ["format_version", "step", "epoch", "step_in_epoch", "samples_seen", "global_batch", "num_ps",
        "num_workers", "towers", "complete", "parent_step"]
UINTS = ["seed", "checksum"]
STRINGS = ["drtrain_version", "model", "optimizer", "optimizer_config", "config", "created", "checksum_algorithm",
           "run_id", "parent_run_id", "lineage"]
M64 = (1 << 64) - 1


def splitmix64(x):
    """x: numpy uint64 array; arithmetic wraps mod 2^64."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def fnv1a64(text):
    h = 1469598103934665603
    for c in text.encode():
        h = ((h ^ c) * 1099511628211) & M64
    return np.uint64(h)


def checksum_of(path, values):
    bits = np.ascontiguousarray(values, dtype="<f4").reshape(-1).view("<u4").astype(np.uint64)
    index = np.arange(bits.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        terms = splitmix64(fnv1a64(path) ^ splitmix64(index) ^ (bits * np.uint64(0x9E3779B97F4A7C15)))
        return int(terms.sum(dtype=np.uint64))


def main():
    path, model = sys.argv[1], sys.argv[2]
    problems = []
    with h5py.File(path, "r") as f:
        for name in INTS + UINTS + STRINGS + ["shard_boundaries"]:
            if name not in f.attrs:
                problems.append(f"attribute {name} is missing")
        for name in INTS:
            if name in f.attrs and not np.issubdtype(np.asarray(f.attrs[name]).dtype, np.signedinteger):
                problems.append(f"attribute {name} is not a signed integer")
        for name in STRINGS:
            if name in f.attrs and not isinstance(f.attrs[name], (bytes, np.bytes_)):
                problems.append(f"attribute {name} is not a fixed-length string")
        if problems:
            print("\n".join(problems))
            return 1
        attr = lambda n: f.attrs[n].decode() if isinstance(f.attrs[n], (bytes, np.bytes_)) else f.attrs[n]
        if attr("model") != model:
            problems.append(f"model is {attr('model')}, expected {model}")
        if attr("format_version") != 1 or attr("complete") != 1:
            problems.append("format_version or complete is not 1")
        bounds = np.asarray(f.attrs["shard_boundaries"])
        # Span boundaries: num_ps + 1 for a contiguous plan, more for a striped one.
        if len(bounds) < attr("num_ps") + 1 or bounds[0] != 0 or np.any(np.diff(bounds.astype(np.int64)) < 0):
            problems.append("shard_boundaries do not match num_ps")
        optimizer = attr("optimizer")
        slots = {"sgd": ["momentum"], "adam": ["exp_avg", "exp_avg_sq"], "adamw": ["exp_avg", "exp_avg_sq"]}[optimizer]
        if optimizer == "sgd" and "momentum" not in attr("optimizer_config"):
            slots = []  # plain SGD keeps no state
        if sorted(f["optimizer"].keys()) != sorted(slots):
            problems.append(f"/optimizer holds {list(f['optimizer'].keys())}, expected {slots}")
        groups = [("params", f["params"])] + [(f"optimizer/{s}", f["optimizer"][s]) for s in slots]
        total = 0
        for group_name, group in groups:
            names = list(group.keys())
            expected = [t for t, _ in MODELS[model]]
            if sorted(names) != sorted(expected):
                problems.append(f"/{group_name} holds {names}, expected {expected}")
                continue
            if names != expected:
                problems.append(f"/{group_name} does not list tensors in model order: {names}")
            for tensor, shape in MODELS[model]:
                data = group[tensor]
                if data.shape != shape or data.dtype != np.float32:
                    problems.append(f"/{group_name}/{tensor}: {data.shape} {data.dtype}, expected {shape} float32")
                total = (total + checksum_of(f"/{group_name}/{tensor}", data[()])) & M64
        if total != int(f.attrs["checksum"]):
            problems.append(f"checksum: file says {int(f.attrs['checksum']):016x}, recomputed {total:016x}")
        # Runs: a fresh 128-bit id; the lineage ends with it, after the parent (run@step) if any.
        run_id, parent, parent_step = attr("run_id"), attr("parent_run_id"), int(attr("parent_step"))
        lineage = attr("lineage").split()
        if len(run_id) != 32 or any(c not in "0123456789abcdef" for c in run_id):
            problems.append(f"run_id {run_id!r} is not 32 hex digits")
        if not lineage or lineage[-1] != run_id:
            problems.append(f"lineage {attr('lineage')!r} does not end with the run id")
        if parent_step < 0 and (parent or len(lineage) != 1):
            problems.append(f"a run from scratch (parent_step {parent_step}) with parent {parent!r}, lineage {lineage}")
        if parent_step >= 0 and parent and (len(lineage) < 2 or lineage[-2] != f"{parent}@{parent_step}"):
            problems.append(f"lineage {lineage} does not end with the parent {parent}@{parent_step}")
        if "[" not in attr("config") and "model =" not in attr("config"):
            problems.append("config does not hold the resolved configuration")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"ok: {path}: every documented field present, tensors in order, checksum recomputed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
