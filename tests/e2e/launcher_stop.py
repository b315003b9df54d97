#!/usr/bin/python3
"""A stop signal sent to the launcher (not to a rank) reaches the caller as exit status 75, with a
complete checkpoint (tests/CMakeLists.txt, launcher_stop.*; issue 34, item 7).

  usr1        SIGUSR1 to plain mpiexec (Open MPI's mpirun or MPICH's mpiexec.hydra): both forward it to
              every rank, SIGUSR1 is one of drtrain's default --stop-signals, so every rank stops,
              the PS save, and mpiexec exits 75.
  local-term  SIGTERM to jobs/local_mpirun.sh (Open MPI): it passes SIGUSR1 on to mpiexec and exits 75.
  local-int   SIGINT (Ctrl-C) to jobs/local_mpirun.sh: the same.

Each case then checks the checkpoint that LATEST names with drtrain-ckpt verify. The job trains until
stopped; the signal goes after its first checkpoint, whenever that comes (no timing assumed)."""
import argparse
import glob
import os
import shlex
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import Job, run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = ["--num-ps", "1", "--max-steps", "100000", "--epochs", "1000", "--dataset", "synthetic", "--model", "mlp",
         "--eval", "false", "--lr-schedule", "constant", "--warmup-steps", "0", "--log-every", "10",
         "--checkpoint-every", "2"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=["usr1", "local-term", "local-int"])
    a = ap.parse_args()
    d = os.path.join(a.work, a.case)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ck = os.path.join(d, "ck")
    env = None
    if a.case == "usr1":
        cmd = shlex.split(a.mpiexec) + ["-n", "3", os.path.join(a.bin, "drtrain")] + TRAIN + ["--checkpoint-dir", ck]
        sig = signal.SIGUSR1
    else:
        if "mpich" in a.mpiexec:
            print("SKIP: jobs/local_mpirun.sh launches with Open MPI's mpiexec; this build is MPICH's")
            return 77
        env = dict(os.environ, DRT_BUILD=os.path.dirname(os.path.abspath(a.bin)))
        cmd = [os.path.join(ROOT, "jobs", "local_mpirun.sh"), "3", "/dev/null"] + TRAIN + ["--checkpoint-dir", ck]
        sig = signal.SIGTERM if a.case == "local-term" else signal.SIGINT
    job = Job(cmd, os.path.join(d, "out"), env=env)
    job.wait_for(lambda: glob.glob(os.path.join(ck, "ckpt-*.h5")), "a first checkpoint", directory=ck)
    os.kill(job.proc.pid, sig)
    code, out = job.finish(directory=ck)
    name = signal.Signals(sig).name
    if code != 75:
        job.fail(f"{a.case}: {name} to the launcher: exit status {code}, expected 75", ck)
    with open(os.path.join(ck, "LATEST")) as f:  # "file = ckpt-N.h5" among other lines
        names = [line.split("=", 1)[1].strip() for line in f if line.startswith("file")]
    if not names:
        job.fail(f"{a.case}: LATEST names no checkpoint file", ck)
    latest = os.path.join(ck, names[0])
    run([os.path.join(a.bin, "drtrain-ckpt"), "verify", latest])
    print(f"ok: {a.case}: {name} to {os.path.basename(cmd[0])}: exit status 75, {os.path.basename(latest)} verifies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
