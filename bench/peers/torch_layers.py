#!/usr/bin/python3
"""PyTorch peer of build/bin/drt_bench_layers: forward and forward+backward time of the CNN's
layers on the CPU, same shapes, batch and threads, so the convolution drtrain uses can be
compared with PyTorch's on the same layer. Prints one aligned row per layer and a JSON line.

  /usr/bin/python3 bench/peers/torch_layers.py --batch 64 --threads 1
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import set_blas_coretype, set_thread_env  # noqa: E402  (before torch loads)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    set_blas_coretype("auto")
    set_thread_env(a.threads)
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    n = a.batch
    cases = [
        ("conv5x5 1->32 pad 2 (no input grad)", torch.nn.Conv2d(1, 32, 5, padding=2), (n, 1, 28, 28), False),
        ("conv5x5 32->64 pad 2", torch.nn.Conv2d(32, 64, 5, padding=2), (n, 32, 14, 14), True),
        ("maxpool2", torch.nn.MaxPool2d(2), (n, 32, 28, 28), True),
        ("linear 3136->512", torch.nn.Linear(3136, 512), (n, 3136), True),
    ]
    print(f"torch_layers: torch {torch.__version__}, batch {n}, {a.threads} thread(s), "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(library default)')}")
    print(f"{'layer':44s} {'fwd ms':>10s} {'fwd+bwd ms':>10s}")
    rows = []
    for name, layer, shape, input_grad in cases:
        x = torch.randn(*shape, requires_grad=input_grad)
        y = layer(x)
        dy = torch.randn_like(y)

        def fwd():
            return layer(x)

        def train():
            layer.zero_grad(set_to_none=True)
            layer(x).backward(dy)

        for _ in range(3):
            train()
        t0 = time.perf_counter()
        for _ in range(a.reps):
            with torch.no_grad():
                fwd()
        f = (time.perf_counter() - t0) / a.reps
        t0 = time.perf_counter()
        for _ in range(a.reps):
            train()
        b = (time.perf_counter() - t0) / a.reps
        print(f"{name:44s} {f * 1e3:10.2f} {b * 1e3:10.2f}")
        rows.append({"layer": name, "fwd_ms": f * 1e3, "train_ms": b * 1e3})
    print(json.dumps({"bench": "torch_layers", "batch": n, "threads": a.threads, "torch": torch.__version__,
                      "rows": rows}))


if __name__ == "__main__":
    main()
