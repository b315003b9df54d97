#!/usr/bin/python3
"""PyTorch peer of drtrain for the training-throughput benchmark (bench/train_throughput.sh).

Trains the same models as drtrain (mlp, cnn) with the same loss (cross entropy, mean over the
global batch) and optimizer (SGD, lr 0.05, momentum 0.9) on the same data (synthetic, or
Fashion-MNIST read from the IDX .gz files, pixels / 255, no normalisation), and prints one JSON
line with the measured samples/s:

  {"peer":"torch","model":..,"dataset":..,"ranks":..,"threads":..,"batch_size":..,
   "samples_per_s":..,"torch":..., ...}

--ranks 1: one plain process (no DDP). --ranks N > 1: DistributedDataParallel over gloo (CPU),
N processes started with torch.multiprocessing.spawn, rendezvous tcp://127.0.0.1:<free port>;
each rank takes global_batch / N samples of every global batch. --rendezvous tcp://HOST:PORT:
the processes were started by an MPI launcher (one per rank, e.g. across the emulated cluster's
nodes, bench/cluster_train.sh); rank and size come from its environment (Open MPI's
OMPI_COMM_WORLD_RANK/SIZE or MPICH's PMI_RANK/PMI_SIZE) and --ranks is ignored.
--model also takes drtrain's "mlp:784-H1-...-10" form (ReLU between the layers).

samples/s = global samples of the --steps timed steps / wall time of those steps, measured on
rank 0; --warmup steps run first and are not timed. In DDP mode all ranks meet in a barrier
before and after the timed region.

--device cuda (single process only; bench/gpu/run.sh): the model and each batch on the GPU. The
data set stays in host memory and each batch is gathered there and copied to the GPU (that copy
is timed); the timed region starts and ends with torch.cuda.synchronize(), so GPU work still
queued when the loop ends is counted.

Run with Debian's interpreter: /usr/bin/python3 bench/peers/torch_train.py --help
"""

import argparse
import gzip
import json
import os
import socket
import struct
import sys
import time


def add_data_args(p, models):
    """The flags every peer shares (tf_train.py too): what is trained, on which data, with which
    optimizer and how many steps are timed."""
    p.add_argument("--model", default="mlp", help=models)
    p.add_argument("--dataset", choices=["synthetic", "fashion-mnist"], default="synthetic")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                   help="directory with the Fashion-MNIST IDX .gz files")
    p.add_argument("--synthetic-train", type=int, default=60000, help="images of --dataset synthetic")
    p.add_argument("--batch-size", type=int, default=128, help="global batch")
    p.add_argument("--steps", type=int, default=100, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before the timed ones")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1, help="weights, synthetic data and data order")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_data_args(p, "mlp | cnn | resnet20 | mlp:784-H1-...-10")
    p.add_argument("--ranks", type=int, default=1, help="1: single process; N > 1: DDP (gloo) with N processes")
    p.add_argument("--rendezvous", default="",
                   help="tcp://HOST:PORT: DDP among processes an MPI launcher started (rank and size from its env)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the model trains (cuda: --ranks 1 only)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per process (also OPENBLAS/OMP/MKL_NUM_THREADS)")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="--device cuda: let cuDNN time its algorithms and keep the fastest (torch.backends.cudnn.benchmark)")
    p.add_argument("--channels-last", action="store_true",
                   help="convolutional models in torch.channels_last memory format (often faster on CPU)")
    p.add_argument("--omp-wait-policy", choices=["default", "passive", "active"], default="default",
                   help="OMP_WAIT_POLICY for torch's OpenMP threads (passive: idle threads sleep instead of "
                        "spinning, leaving the cores to OpenBLAS's own threads)")
    p.add_argument("--blas-coretype", default="auto",
                   help="OPENBLAS_CORETYPE for torch's OpenBLAS: auto (drtrain's rule: when OpenBLAS falls "
                        "back to a generic core on an AVX-512/AVX2 CPU, use SkylakeX/Haswell), none (leave "
                        "OpenBLAS's own choice), or a core name")
    a = p.parse_args(argv)
    if a.ranks < 1 or a.threads < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--ranks, --threads and --steps must be >= 1, --warmup >= 0")
    if a.device == "cuda" and a.ranks != 1:
        p.error("--device cuda runs a single process: use --ranks 1")
    if a.batch_size < a.ranks or a.batch_size % a.ranks != 0:
        p.error(f"--batch-size {a.batch_size} must be a multiple of --ranks {a.ranks}")
    return a


GENERIC_CORES = {"Prescott", "Core2", "Nehalem", "Penryn", "Dunnington", "Atom"}


def openblas_core_in_child():
    """The core OpenBLAS picks on its own, asked in a child process so that this process can
    still set OPENBLAS_CORETYPE before it loads the library (with torch)."""
    import subprocess
    code = ("import ctypes\n"
            "for name in ('libopenblas.so.0', 'libblas.so.3'):\n"
            "    try:\n"
            "        f = ctypes.CDLL(name).openblas_get_corename\n"
            "    except (OSError, AttributeError):\n"
            "        continue\n"
            "    f.restype = ctypes.c_char_p\n"
            "    print(f().decode())\n"
            "    break\n")
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return out.stdout.strip()


def set_blas_coretype(mode):
    """drtrain re-executes itself with OPENBLAS_CORETYPE=SkylakeX (or Haswell) when Debian's
    DYNAMIC_ARCH OpenBLAS does not recognise the CPU and falls back to generic SSE3 kernels
    (src/backend/blas_kernels.cpp); torch links the same OpenBLAS, so the peer applies the same
    rule, or GEMMs would run about 4x slower and the comparison would measure that instead."""
    if mode == "none":
        return
    if mode != "auto":
        os.environ["OPENBLAS_CORETYPE"] = mode
        return
    if os.environ.get("OPENBLAS_CORETYPE") or openblas_core_in_child() not in GENERIC_CORES:
        return
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


def loaded_openblas_core():
    """The core of the OpenBLAS this process loaded (after importing torch), or ""."""
    import ctypes
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "openblas" in line and ".so" in line}
    for path in sorted(paths):
        try:
            fn = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_char_p
        return fn().decode()
    return ""


def set_thread_env(threads):
    """Must run before torch is imported: torch.set_num_threads does not limit OpenBLAS."""
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


# ---------------------------------------------------------------------------------------------
# Data (numpy only; converted to torch tensors by the caller)

def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    import numpy as np
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_data(a):
    """Returns (float32 images [N, 784] in [0, 1], int64 labels [N]) as numpy arrays."""
    import numpy as np
    if a.dataset == "synthetic":
        rng = np.random.default_rng(a.seed)
        pixels = rng.integers(0, 256, size=(a.synthetic_train, 784), dtype=np.uint8)
        labels = rng.integers(0, 10, size=a.synthetic_train, dtype=np.int64)
    else:
        pixels = read_idx(os.path.join(a.data_dir, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
        labels = read_idx(os.path.join(a.data_dir, "train-labels-idx1-ubyte.gz")).astype(np.int64)
        if pixels.shape[0] != labels.shape[0]:
            raise SystemExit(f"{a.data_dir}: {pixels.shape[0]} images but {labels.shape[0]} labels")
    return pixels.astype(np.float32) / 255.0, labels


# ---------------------------------------------------------------------------------------------
# Models

def make_model(name):
    import torch.nn as nn
    if name == "mlp":
        name = "mlp:784-512-256-10"
    if name.startswith("mlp:"):
        widths = [int(w) for w in name[4:].split("-")]
        layers = []
        for i in range(len(widths) - 1):
            layers += [nn.Linear(widths[i], widths[i + 1])] + ([nn.ReLU()] if i + 2 < len(widths) else [])
        return nn.Sequential(*layers)
    if name == "resnet20":
        return resnet20()
    if name != "cnn":
        raise SystemExit(f"unknown --model {name}")
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))


def resnet20(in_channels=1, classes=10):
    """drtrain's models/resnet20.model in torch: 3x3 conv 16 (no bias), BN, ReLU; 3 stages of 3
    basic blocks at 16/32/64 channels (stride 2 into stages 2 and 3, whose first block's
    shortcut is a 1x1 stride-2 conv + BN); global average pooling; linear. Same tensor shapes."""
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu_()))
            return (y + (x if self.downsample is None else self.downsample(x))).relu_()

    layers = [nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True)]
    cin = 16
    for stage, c in enumerate([16, 32, 64]):
        for b in range(3):
            layers.append(Block(cin, c, 2 if stage > 0 and b == 0 else 1))
            cin = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes)]
    return nn.Sequential(*layers)


# ---------------------------------------------------------------------------------------------
# Training

def train(rank, a, port):
    """Body of every process (rank 0 alone with --ranks 1). Prints the JSON line on rank 0."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    ddp = a.ranks > 1
    if ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        init = a.rendezvous or f"tcp://127.0.0.1:{port}"
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=a.ranks)

    pixels, labels = load_data(a)
    images = torch.from_numpy(pixels)
    if a.model in ("cnn", "resnet20"):
        images = images.view(-1, 1, 28, 28)
    grad_bytes = 4 * sum(p.numel() for p in make_model(a.model).parameters())
    targets = torch.from_numpy(labels)
    count = images.shape[0]
    global_batch, local = a.batch_size, a.batch_size // a.ranks
    steps_per_epoch = count // global_batch  # the last partial batch of an epoch is dropped
    if steps_per_epoch < 1:
        raise SystemExit(f"{count} images are fewer than one batch of {global_batch}")

    torch.manual_seed(a.seed)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    device = torch.device(a.device)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    if a.device == "cuda":
        torch.backends.cudnn.benchmark = a.cudnn_benchmark
    model = make_model(a.model).to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if ddp:
        model = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)

    perm, perm_epoch = None, -1

    def batch(step):
        nonlocal perm, perm_epoch
        epoch, s = divmod(step, steps_per_epoch)
        if epoch != perm_epoch:  # per-epoch seeded permutation, identical on every rank
            perm = torch.from_numpy(np.random.default_rng([a.seed, epoch]).permutation(count))
            perm_epoch = epoch
        idx = perm[s * global_batch + rank * local: s * global_batch + (rank + 1) * local]
        if a.device == "cpu":
            return images[idx], targets[idx]
        return images[idx].to(device), targets[idx].to(device)

    def step(i):
        x, y = batch(i)
        if a.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        opt.zero_grad(set_to_none=True)
        # Mean over the local batch; DDP averages over ranks, so the gradient is the mean over
        # the global batch, as in drtrain.
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    def sync():
        # GPU work is queued asynchronously: wait for it, or the clock stops before it ran.
        if a.device == "cuda":
            torch.cuda.synchronize()

    model.train()
    for i in range(a.warmup):
        step(i)
    if ddp:
        dist.barrier()
    sync()
    t0 = time.perf_counter()
    loss = None
    for i in range(a.warmup, a.warmup + a.steps):
        loss = step(i)
    if ddp:
        dist.barrier()
    sync()
    wall = time.perf_counter() - t0
    final_loss = float(loss.detach())

    if rank == 0:
        print(json.dumps({
            "peer": "torch", "model": a.model, "dataset": a.dataset, "ranks": a.ranks,
            "threads": a.threads, "batch_size": global_batch,
            "samples_per_s": a.steps * global_batch / wall,
            "torch": torch.__version__, "gradient_bytes": grad_bytes,
            "step_ms": 1e3 * wall / a.steps,
            "steps": a.steps, "warmup": a.warmup, "wall_s": wall, "last_loss": final_loss,
            "torch_threads": torch.get_num_threads(), "openblas_core": loaded_openblas_core(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
            "device": a.device, "channels_last": a.channels_last,
            **({"gpu": torch.cuda.get_device_name(0), "torch_cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(),
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32} if a.device == "cuda" else {}),
        }), flush=True)
    if ddp:
        dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_entry(rank, a, port):
    train(rank, a, port)


def main():
    a = parse_args()
    set_thread_env(a.threads)  # before the first import of torch; spawned ranks inherit it
    set_blas_coretype(a.blas_coretype)
    if a.omp_wait_policy != "default":
        os.environ["OMP_WAIT_POLICY"] = a.omp_wait_policy.upper()
    if a.rendezvous:
        env = os.environ
        rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("PMI_RANK", "0")))
        a.ranks = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("PMI_SIZE", "1")))
        train(rank, a, None)
        return
    if a.ranks == 1:
        train(0, a, None)
        return
    import torch.multiprocessing as mp
    mp.spawn(spawn_entry, args=(a, free_port()), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
