#!/usr/bin/python3
"""Nothing lost in every mode: kill -9, SIGTERM or SIGUSR1 to a random rank at a random moment, in
sync (--deterministic), backup, ssp and async, then --resume until the run completes.

Each trial (tests/CMakeLists.txt runs one per mode; tests/e2e/chaos.sh runs many):
  1. a job (2 PS + 2 workers, or 1 PS + 2 workers) trains a small MLP for --steps steps with a
     background checkpoint every 7 steps and --resume; once it has published a checkpoint, a
     random rank gets kill -9, SIGTERM or SIGUSR1 after a random delay;
  2. the job must end within the hang guard (a killed rank: within --hang-timeout; a signal: exit
     75 once the ranks agree), and what the directory holds must be sound: every checkpoint
     verifies (drtrain-ckpt verify: complete, checksum), belongs to this run's line of runs
     (LATEST names it; its lineage contains every checkpoint's run id), and no temporary file is
     left except by a killed writer (the next save removes it);
  3. --resume, again and again (the event repeats, a fresh random one, until a run completes);
  4. the end: sync with --deterministic is bitwise the final checkpoint of an uninterrupted run
     (drtrain-ckpt diff --rtol 0); ssp/async ends at a cut with every worker at the last step and
     exactly W x steps gradients applied; backup ends at the last step.

usage: chaos.py --bin BUILD/bin --mpiexec "mpiexec ..." --work DIR [--trials N] [--modes ...] [--seed K]
"""
import argparse
import os
import random
import re
import shutil
import signal
import time

import h5py

from e2e_util import Job, drtrain_ranks, run

HANG_TIMEOUT = 20
EVERY = 7


class Trial:
    def __init__(self, a, rng, index, mode):
        self.a, self.rng, self.mode = a, rng, mode
        self.ps, self.workers = rng.choice([(1, 2), (2, 2)])
        self.dir = os.path.join(a.work, f"trial-{index}-{mode.replace(':', '-')}")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.what = f"trial {index}: --sync-mode {mode}, {self.ps} PS + {self.workers} workers"

    def args(self, directory, steps):
        # steps 0: the run lasts until the event ends it (an epoch of this model takes well under a
        # second: no length of run would outlive an event on every machine).
        flags = ["--num-ps", str(self.ps), "--dataset", "synthetic", "--synthetic-train", "2048", "--model",
                 "mlp:784-64-10", "--batch-size", "32", "--epochs", "1000", "--max-steps", str(steps),
                 "--eval", "false", "--log-every", "1000", "--checkpoint-dir", directory, "--checkpoint-every",
                 str(EVERY), "--keep", "4", "--hang-timeout", str(HANG_TIMEOUT), "--sync-mode", self.mode]
        if self.mode == "sync":
            flags += ["--deterministic"]
        return flags

    def command(self, directory, steps, resume=True):
        return self.a.mpiexec.split() + ["-n", str(self.ps + self.workers), os.path.join(self.a.bin, "drtrain")] + \
            self.args(directory, steps) + (["--resume"] if resume else [])

    def newest_step(self):
        """The furthest step of the newest checkpoint: its name, or under ssp/async the furthest
        worker's step (such a checkpoint is named after the gradients applied / W, and async
        workers can stand far apart at a cut: a final run to name + --steps would end before a
        worker's own position, seen on a loaded machine: worker_steps [938, 862] in ckpt 900)."""
        steps = [int(f[5:-3]) for f in os.listdir(self.dir) if re.fullmatch(r"ckpt-\d+\.h5", f)]
        if not steps:
            return 0
        with h5py.File(os.path.join(self.dir, f"ckpt-{max(steps):08d}.h5"), "r") as h:
            workers = [int(x) for x in h.attrs["worker_steps"]] if "worker_steps" in h.attrs else []
        return max([max(steps)] + workers)

    def check_directory(self, log):
        files = sorted(os.listdir(self.dir))
        ckpts = [f for f in files if re.fullmatch(r"ckpt-\d+\.h5", f)]
        run_ids, lineages = set(), []
        for f in ckpts:
            code, out = run([os.path.join(self.a.bin, "drtrain-ckpt"), "verify", os.path.join(self.dir, f)],
                            expect_ok=None)
            if code != 0:
                print(log)
                raise SystemExit(f"FAIL: {self.what}: {f} does not verify after the event:\n{out}")
            with h5py.File(os.path.join(self.dir, f), "r") as h:
                run_ids.add(h.attrs["run_id"].decode() if isinstance(h.attrs["run_id"], bytes) else h.attrs["run_id"])
                lin = h.attrs["lineage"]
                lineages.append(lin.decode() if isinstance(lin, bytes) else lin)
        # Every file belongs to one line of runs: the newest file's lineage names every run id.
        if ckpts:
            newest = lineages[-1]
            foreign = [r for r in run_ids if r not in newest]
            if foreign:
                raise SystemExit(f"FAIL: {self.what}: checkpoints of runs {foreign} are not in the line {newest}")

    def event(self, job):
        job.wait_for(lambda: any(re.fullmatch(r"ckpt-\d+\.h5", f) for f in os.listdir(self.dir))
                     if os.path.isdir(self.dir) else False, "a first checkpoint", directory=self.dir)
        # Once the chief has said which run this is, every rank is past its start-up (a signal
        # before a program has set up its handlers takes its default action, in any program).
        job.wait_for(lambda: re.search(r"^run [0-9a-f]{32}", job.output(), re.M) is not None,
                     "the run to start", directory=self.dir)
        time.sleep(self.rng.uniform(0.0, 1.5))
        ranks = drtrain_ranks(self.dir)
        if not ranks or job.proc.poll() is not None:
            job.fail(f"{self.what}: the run ended before its event: it must last until the event")
        victim = self.rng.choice(sorted(ranks))
        sig = self.rng.choice([signal.SIGKILL, signal.SIGTERM, signal.SIGUSR1])
        try:
            os.kill(victim, sig)
        except ProcessLookupError:
            return "none (the rank had gone)"
        return f"{signal.Signals(sig).name} to pid {victim}"

    # (The first run of a trial starts from scratch: its first checkpoint comes at step 7.)

    def play(self):
        print(self.what, flush=True)
        for attempt in range(20):
            # The runs with an event last until it; the last runs to `steps` past the newest
            # checkpoint (resumes after a kill may need several).
            if attempt == self.a.events:
                self.steps = self.newest_step() + self.a.steps
            endless = attempt < self.a.events
            job = Job(self.command(self.dir, 0 if endless else self.steps), self.dir + f".run{attempt}.log")
            what = self.event(job) if endless else "none"
            t0 = time.time()
            code, out = job.finish(directory=self.dir)
            print(f"  run {attempt}: {what}: exit {code} after {time.time() - t0:.1f} s", flush=True)
            if code not in (0, 75) and "KILL" not in what:
                print(out)
                raise SystemExit(f"FAIL: {self.what}: run {attempt} exited {code} after {what}")
            self.check_directory(out)
            if code == 0 and not endless:
                return out
        raise SystemExit(f"FAIL: {self.what}: no run completed in 20")

    def check_end(self, out):
        steps = self.steps
        final = os.path.join(self.dir, f"ckpt-{steps:08d}.h5")
        if self.mode == "sync":
            ref = self.dir + ".reference"
            shutil.rmtree(ref, ignore_errors=True)
            run(self.command(ref, steps, resume=False))
            run([os.path.join(self.a.bin, "drtrain-ckpt"), "diff", final, os.path.join(ref, f"ckpt-{steps:08d}.h5"),
                 "--rtol", "0"])
            return "bitwise the uninterrupted run"
        files = sorted(f for f in os.listdir(self.dir) if re.fullmatch(r"ckpt-\d+\.h5", f))
        with h5py.File(os.path.join(self.dir, files[-1]), "r") as h:
            if self.mode.startswith("backup"):
                if int(h.attrs["step"]) != steps:
                    raise SystemExit(f"FAIL: {self.what}: the last checkpoint is of step {h.attrs['step']}")
                return f"step {steps}"
            ws = [int(x) for x in h.attrs["worker_steps"]]
            g = int(h.attrs["gradients"])
        if ws != [steps] * self.workers or g != self.workers * steps:
            raise SystemExit(f"FAIL: {self.what}: the last checkpoint holds worker_steps {ws} and {g} gradients, "
                             f"expected {[steps] * self.workers} and {self.workers * steps}")
        return f"a cut with every worker at {steps} and {g} gradients"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--steps", type=int, default=30, help="the last run's steps past the newest checkpoint")
    p.add_argument("--events", type=int, default=2, help="runs that get an event before the rest run through")
    p.add_argument("--modes", default="sync,backup:1,ssp:2,async")
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    print(f"chaos: seed {seed} (rerun with --seed {seed})", flush=True)
    rng = random.Random(seed)
    os.makedirs(a.work, exist_ok=True)
    modes = a.modes.split(",")
    for i in range(a.trials):
        t = Trial(a, rng, i, modes[i % len(modes)])
        out = t.play()
        print(f"  end: {t.check_end(out)}", flush=True)
    print("PASS")


if __name__ == "__main__":
    main()
