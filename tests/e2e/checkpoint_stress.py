#!/usr/bin/python3
"""Background checkpoints under stress (run by ctest; see tests/CMakeLists.txt).

usage: checkpoint_stress.py --bin BUILD/bin --mpiexec "mpiexec ..." --work DIR [--trials N] [--steps S]
                            [--load L] [--seed K] [--modes sync,async,...]

Each trial trains a small MLP on synthetic data with several PS (2 PS + 2 workers, or 3 PS + 1
worker) saving a background checkpoint every 1 to 3 steps (--keep 2, --resume into the same
directory), while L busy processes load the CPU. Saves then overlap all the time: a save is due
while the previous one is still being written on some PS and already complete on others. A trial
passes when the job exits 0, its last checkpoint verifies, every save that was due was written or
skipped with the documented warning, and no temporary file is left. A crash fails it (the exit
status and the output are printed); so does a stall: the job's --hang-timeout turns a deadlock
into an error exit, and the harness kills a job that outlives --hang-timeout by far.
CI runs 2 trials; tests/e2e/checkpoint_stress.sh runs many (e.g. --trials 50 --load 2).
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import time

HANG_TIMEOUT = 60


def busy_loops(count):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def trial(a, rng, index, mode):
    d = os.path.join(a.work, f"trial-{index}")
    shutil.rmtree(d, ignore_errors=True)
    ps, workers = rng.choice([(2, 2), (3, 1), (2, 1)])
    every = rng.choice([1, 2, 3])
    steps = a.steps
    cmd = a.mpiexec.split() + ["-n", str(ps + workers), os.path.join(a.bin, "drtrain"), "--num-ps", str(ps),
                               "--dataset", "synthetic", "--synthetic-train", "4096", "--model", "mlp:784-256-256-10",
                               "--batch-size", "64", "--epochs", "1000", "--max-steps", str(steps), "--eval", "false",
                               "--log-every", "1000", "--checkpoint-dir", d, "--checkpoint-every", str(every),
                               "--keep", "2", "--resume", "--hang-timeout", str(HANG_TIMEOUT), "--sync-mode", mode]
    what = f"trial {index}: {ps} PS + {workers} worker(s), --sync-mode {mode}, a save every {every} step(s)"
    print(what, flush=True)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=10 * HANG_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        print(e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace"))
        raise SystemExit(f"FAIL: {what}: the job stalled: still running after {10 * HANG_TIMEOUT} s "
                         f"(--hang-timeout {HANG_TIMEOUT} did not end it)")
    out = p.stdout
    files = sorted(os.listdir(d)) if os.path.isdir(d) else []

    def fail(why):
        print(out)
        raise SystemExit(f"FAIL: {what}: {why} (exit status {p.returncode}, {time.time() - t0:.1f} s, "
                         f"directory: {files})")

    if p.returncode != 0:
        fail("the job failed")
    final = os.path.join(d, f"ckpt-{steps:08d}.h5")
    if not os.path.exists(final):
        fail(f"no final checkpoint {os.path.basename(final)}")
    leftovers = [f for f in files if f.endswith(".tmp")]
    if leftovers:
        fail(f"temporary files left: {leftovers}")
    verify = subprocess.run([os.path.join(a.bin, "drtrain-ckpt"), "verify", final], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    if verify.returncode != 0:
        print(verify.stdout)
        fail("the final checkpoint does not verify")
    written = len(re.findall(r"checkpoint \S+ckpt-\d+\.h5: ", out))
    skipped = re.search(r"(\d+) checkpoint\(s\) skipped in all", out)
    skipped = int(skipped.group(1)) if skipped else 0
    due = steps // every + (0 if steps % every == 0 else 1)  # the final save, when not on a due step
    if written + skipped != due:
        fail(f"{written} checkpoints written and {skipped} skipped, expected {due} in all")
    print(f"  ok: {written} written, {skipped} skipped, {time.time() - t0:.1f} s", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--load", type=int, default=1, help="busy processes during the trials")
    p.add_argument("--modes", default="sync", help="comma-separated --sync-mode values, taken in turn")
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    print(f"checkpoint_stress: seed {seed} (rerun with --seed {seed})", flush=True)
    rng = random.Random(seed)
    os.makedirs(a.work, exist_ok=True)
    modes = a.modes.split(",")
    load = busy_loops(a.load)
    try:
        for i in range(a.trials):
            trial(a, rng, i, modes[i % len(modes)])
    finally:
        for proc in load:
            proc.kill()
            proc.wait()
    print("PASS")


if __name__ == "__main__":
    main()
