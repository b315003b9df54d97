#!/usr/bin/python3
"""End-to-end checkpoint tests on real files (run by ctest; see tests/CMakeLists.txt).

usage: checkpoint_files.py --bin BUILD/bin --mpiexec "mpiexec --oversubscribe ..." --work DIR CASE
CASE:
  fixture   train 60 steps of the MLP (1 PS + 2 workers), checkpoints every 20 -> DIR/good
  h5py      every documented field, read with h5py (check_checkpoint.py)
  h5dump    h5dump -H lists the layout
  tool      drtrain-ckpt info, stats, verify, diff and export
  bad       truncated, bit-flipped, wrong model, missing dataset, newer format, empty file, a
            directory of partial files: clear errors or skips with a warning, never a crash/hang
  slow-sync synchronous saves that take longer than --hang-timeout while they make progress (a
            test fault slows each written piece): the job ends normally with every save
  vanish    the newest checkpoint disappears between the check and the parallel open (a test
            fault): --resume skips it with a warning and takes the next
  crash     kill -9 of PS 0 in the middle of a write: the previous checkpoint survives and
            --resume uses it
  preempt   a stop signal (SIGTERM) on one rank, at a step (the chief, another worker with
            --overlap, the PS) and from outside at a random moment: every rank stops after the
            same step, the PS save, every rank exits 75, and --resume then ends bitwise where an
            uninterrupted run ends
  slow      a background checkpoint slower than --hang-timeout (every PS's write of the one after
            100 updates waits until training is 350 steps further): training goes on, the saves
            due meanwhile (200, 300, 400) wait half the hang timeout each and are then skipped
            with a warning, the job ends normally, and every checkpoint is bitwise the one a run
            with --checkpoint-async false writes
  full      a background write that fails on one of 2 PS (disk full): the job ends at once with an
            error naming the checkpoint, nothing half-written is published, --resume continues
            from the previous checkpoint
  model     a model file with batch norm, dropout and a residual add (synthetic data, 1 PS + 2
            workers, --deterministic): batch norm's running statistics are under /state (not
            /params, no optimizer slots), the file holds the model's definition, drtrain-ckpt
            verifies it and exports them with the parameters, and --resume on 2 PS (resharded)
            ends bitwise where an uninterrupted run ends
  runs      a reused directory keeps every run: a run resumed from an older checkpoint of the
            directory (run A wrote 20, 30, 40; B resumes 20 with --keep 1) is refused at start-up,
            leaving A's files as they were, and runs in another directory as a fork of A; after
            A's later files are moved away it runs in place, keeps its own checkpoints, and plain
            --resume continues it; a fresh run into a used directory is refused naming the run and
            its newest step; --keep removes only the run's own line (another run's files stay);
            plain --resume continues the run that wrote last (LATEST) and, when that run's files
            are damaged, refuses rather than continue another run; a second job on a directory
            that a running job holds is refused naming its PS 0; a model mismatch names both models and
            the first line of their definitions that differs
  kill      kill -9 of a random rank at a random moment (training, checkpoint writes, start-up,
            the end), then --resume, again and again until a run completes: the final
            checkpoint is bitwise that of an uninterrupted --deterministic run (--trials N;
            CI runs 2, tests/e2e/kill_anywhere.sh runs many)
"""
import argparse
import hashlib
import glob
import os
import random
import re
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np

from e2e_util import Job, drtrain_ranks, expect, run

HERE = os.path.dirname(os.path.abspath(__file__))


class Case:
    def __init__(self, a):
        self.a = a
        self.good = os.path.join(a.work, "good")
        self.tool = os.path.join(a.bin, "drtrain-ckpt")

    def drtrain(self, ranks, *args, expect_ok=True, env=None, ps=1):
        cmd = self.a.mpiexec.split() + ["-n", str(ranks), os.path.join(self.a.bin, "drtrain"), "--num-ps", str(ps),
                                        "--log-every", "1000", "--eval", "false"] + list(args)
        return run(cmd, expect_ok, env=env)

    def ckpt(self, step):
        return os.path.join(self.good, f"ckpt-{step:08d}.h5")

    def fixture(self):
        shutil.rmtree(self.a.work, ignore_errors=True)
        os.makedirs(self.a.work)
        self.drtrain(3, "--max-steps", "60", "--checkpoint-dir", self.good, "--checkpoint-every", "20")
        for step in (20, 40, 60):
            assert os.path.exists(self.ckpt(step)), self.ckpt(step)

    def h5py(self):
        run(["/usr/bin/python3", os.path.join(HERE, "check_checkpoint.py"), self.ckpt(60), "mlp"])

    def h5dump(self):
        _, out = run(["h5dump", "-H", self.ckpt(60)])
        expect(out, 'DATASET "fc1.weight"', "h5dump -H")
        expect(out, "DATASPACE  SIMPLE { ( 512, 784 ) / ( 512, 784 ) }", "h5dump -H")
        expect(out, 'GROUP "momentum"', "h5dump -H")
        expect(out, 'ATTRIBUTE "checksum"', "h5dump -H")

    def tool_case(self):
        _, out = run([self.tool, "info", self.ckpt(60)])
        expect(out, "step             60", "info")
        expect(out, "/params/fc1.weight", "info")
        expect(out, "parent           none (a run from scratch)", "info")
        with h5py.File(self.ckpt(60), "r") as f:
            run_id = f.attrs["run_id"].decode() if "run_id" in f.attrs else "(no run_id attribute)"
        expect(out, f"run_id           {run_id}", "info")
        _, out = run([self.tool, "verify", self.ckpt(60)])
        expect(out, "checksum matches", "verify")
        _, out = run([self.tool, "stats", self.ckpt(60)])
        expect(out, "/optimizer/momentum/fc3.bias", "stats")
        run([self.tool, "diff", self.ckpt(60), self.ckpt(60)])
        run([self.tool, "diff", self.ckpt(40), self.ckpt(60)], expect_ok=False)
        out_file = os.path.join(self.a.work, "state_dict.h5")
        run([self.tool, "export", self.ckpt(60), out_file])
        with h5py.File(out_file, "r") as f, h5py.File(self.ckpt(60), "r") as g:
            assert sorted(f.keys()) == sorted(g["params"].keys()), sorted(f.keys())
            assert np.array_equal(f["fc1.weight"][()], g["params"]["fc1.weight"][()])
        run([self.tool, "nonsense", self.ckpt(60)], expect_ok=False)

    def make_bad(self, name, edit):
        path = os.path.join(self.a.work, "bad", name, f"ckpt-{60:08d}.h5")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copyfile(self.ckpt(60), path)
        edit(path)
        return path

    def bad(self):
        def truncate(p):
            with open(p, "r+b") as f:
                f.truncate(os.path.getsize(p) // 2)

        def flip(p):  # bytes in the middle of fc1.weight's data
            with h5py.File(p, "r") as f:
                offset = f["params"]["fc1.weight"].id.get_offset()
            with open(p, "r+b") as f:
                f.seek(offset + 4000)
                data = bytearray(f.read(16))
                f.seek(offset + 4000)
                f.write(bytes(b ^ 0x5A for b in data))

        def attribute(name, value):
            def edit(p):
                with h5py.File(p, "r+") as f:
                    f.attrs[name] = value
            return edit

        def redefine(p):  # the stored definition of another model (--resume compares definitions)
            with h5py.File(p, "r+") as f:
                text = f.attrs["model_definition"]
                text = text.decode() if isinstance(text, bytes) else text
                f.attrs["model_definition"] = np.bytes_(text.replace("out=512", "out=500").encode())

        def drop(p):
            with h5py.File(p, "r+") as f:
                del f["params"]["fc1.bias"]

        def empty(p):
            open(p, "w").close()

        cases = [  # (name, edit, verify message, --resume FILE message)
            ("truncated", truncate, "not a readable HDF5 file", "not a readable HDF5 file"),
            ("bitflip", flip, "checksum does not match", "checksum does not match"),
            ("model", redefine, None, "--model mlp differs from the checkpoint's model (--model mlp): node line 1 of "
             "the definition is 'fc1 = linear(input) out=512' here and 'fc1 = linear(input) out=500' in the checkpoint"),
            ("missing", drop, "/params/fc1.bias is missing", "has no dataset /params/fc1.bias"),
            ("version", attribute("format_version", np.int64(99)), "format version 99", "format version 99"),
            ("empty", empty, "not a readable HDF5 file", "not a readable HDF5 file"),
        ]
        for name, edit, verify_msg, resume_msg in cases:
            path = self.make_bad(name, edit)
            if verify_msg:
                code, out = run([self.tool, "verify", path], expect_ok=False)
                expect(out, verify_msg, f"verify {name}")
                expect(out, f"drtrain-ckpt: {path}: ", f"verify {name} names the file")
                # diff and export name a file they cannot open, not the other path of their command line
                for cmd in [] if name in ("bitflip", "missing") else (["diff", self.ckpt(60), path], ["diff", path, self.ckpt(60), "--rtol", "0"],
                            ["export", path, os.path.join(self.a.work, "bad", "export.h5")]):
                    code, out = run([self.tool] + cmd, expect_ok=False)
                    if not any(x.startswith(f"drtrain-ckpt: {path}: ") and verify_msg in x for x in out.splitlines()):
                        print(out)
                        raise SystemExit(f"FAIL: {' '.join(cmd)}: no line 'drtrain-ckpt: {path}: ...{verify_msg}...'")
            code, out = self.drtrain(3, "--max-steps", "61", "--resume", path, expect_ok=False)
            expect(out, resume_msg, f"--resume {name}")
            if out.count("drtrain: error:") != 1:
                raise SystemExit(f"FAIL: --resume {name}: expected one error line\n{out}")
        # A directory holding only broken checkpoints and a leftover temporary file: every file is
        # skipped with a warning naming it, and training starts from scratch.
        partial = os.path.join(self.a.work, "bad", "partial")
        os.makedirs(partial, exist_ok=True)
        shutil.copyfile(os.path.join(self.a.work, "bad", "truncated", "ckpt-00000060.h5"),
                        os.path.join(partial, "ckpt-00000060.h5"))
        shutil.copyfile(os.path.join(self.a.work, "bad", "bitflip", "ckpt-00000060.h5"),
                        os.path.join(partial, "ckpt-00000040.h5"))
        open(os.path.join(partial, "ckpt-00000020.h5"), "w").close()
        shutil.copyfile(self.ckpt(60), os.path.join(partial, ".ckpt-00000080.h5.tmp"))
        _, out = self.drtrain(3, "--max-steps", "5", "--checkpoint-dir", partial, "--resume")
        for step in (60, 40, 20):
            expect(out, f"skipping checkpoint {partial}/ckpt-{step:08d}.h5", "partial directory")
        expect(out, "no valid checkpoint", "partial directory")
        assert not os.path.exists(os.path.join(partial, ".ckpt-00000080.h5.tmp")), "the leftover temporary file stayed"

    def crash(self):
        crash_dir = os.path.join(self.a.work, "crash")
        shutil.rmtree(crash_dir, ignore_errors=True)
        env = dict(os.environ, DRT_TEST_FAULT="checkpoint-write:40")
        code, out = self.drtrain(3, "--max-steps", "60", "--checkpoint-dir", crash_dir, "--checkpoint-every", "20",
                                 expect_ok=False, env=env)
        files = sorted(os.listdir(crash_dir))
        if "ckpt-00000020.h5" not in files or "ckpt-00000040.h5" in files:
            raise SystemExit(f"FAIL: after the crash the directory holds {files}\n{out}")
        run([self.tool, "verify", os.path.join(crash_dir, "ckpt-00000020.h5")])
        _, out = self.drtrain(3, "--max-steps", "60", "--checkpoint-dir", crash_dir, "--resume")
        expect(out, f"resuming from {crash_dir}/ckpt-00000020.h5 after 20 updates: step 21", "--resume after the crash")
        run([self.tool, "verify", os.path.join(crash_dir, "ckpt-00000060.h5")])
        leftovers = [f for f in os.listdir(crash_dir) if f.endswith(".tmp")]
        if leftovers:
            raise SystemExit(f"FAIL: temporary files left: {leftovers}")

    def preempt(self):
        base = os.path.join(self.a.work, "preempt")
        shutil.rmtree(base, ignore_errors=True)
        small = ["--dataset", "synthetic", "--model", "mlp:784-64-10", "--deterministic", "--optimizer", "adam",
                 "--lr", "0.001"]
        total = 40
        ref = os.path.join(base, "ref")
        self.drtrain(3, *small, "--max-steps", str(total), "--checkpoint-dir", ref)
        ref_final = os.path.join(ref, f"ckpt-{total:08d}.h5")

        def stopped_at(code, out, what):
            if code != 75:
                print(out)
                raise SystemExit(f"FAIL: {what}: exit status {code}, expected 75")
            m = re.search(r'"steps":(\d+)', out)
            if not m or '"stopped_by":"SIGTERM"' not in out:
                print(out)
                raise SystemExit(f"FAIL: {what}: the summary does not say where and why the run stopped")
            return int(m.group(1))

        # A signal at step 10 on one rank counts in the first vote that rank casts after it: a
        # worker's vote on step 10 (cast after that step), the PS's on step 10 (the signal comes
        # just before its cast), and with --overlap the vote on step 9 or 10 (the exchange
        # thread casts the vote on step 9 once step 9 is pulled, before or after step 10 starts).
        # The verdict on step s is read before step s + 3: every rank stops after 13 (or 12) steps.
        for name, fault, extra, allowed in [("chief", "signal:1:10", [], (13,)),
                                            ("worker-overlap", "signal:2:10", ["--overlap", "true"], (12, 13)),
                                            ("ps", "signal:0:10", [], (13,))]:
            d = os.path.join(base, name)
            code, out = self.drtrain(3, *small, *extra, "--max-steps", str(total), "--checkpoint-dir", d, expect_ok=None,
                                     env=dict(os.environ, DRT_TEST_FAULT=fault))
            steps = stopped_at(code, out, name)
            expected = steps if steps in allowed else allowed[0]
            if steps != expected or not os.path.exists(os.path.join(d, f"ckpt-{expected:08d}.h5")):
                print(out)
                raise SystemExit(f"FAIL: {name}: stopped after {steps} steps with {sorted(os.listdir(d))}, "
                                 f"expected {expected}")
            expect(out, f"stopping after step {expected} of 40: SIGTERM reached a rank", name)
            _, out = self.drtrain(3, *small, *extra, "--max-steps", str(total), "--checkpoint-dir", d, "--resume")
            expect(out, f"after {expected} updates: step {expected + 1} of 40", f"{name}: resume")
            run([self.tool, "diff", os.path.join(d, f"ckpt-{total:08d}.h5"), ref_final])  # exit 1 on any difference

        # From outside, at a moment the test does not choose: SIGTERM to one worker process. The job
        # runs until told (an epoch of this model takes well under a second on a fast machine, so
        # its length is set by --epochs, not by the machine's speed).
        d = os.path.join(base, "external")
        endless = ["--epochs", "100000"]
        job = Job(self.a.mpiexec.split() + ["-n", "3", os.path.join(self.a.bin, "drtrain"), "--num-ps", "1",
                                            "--log-every", "1000", "--eval", "false", *small, *endless,
                                            "--checkpoint-dir", d, "--checkpoint-every", "50"],
                  os.path.join(base, "external.log"))
        # Any checkpoint: with --keep 3 at a millisecond a step, the one after 50 updates may be
        # gone before a poll sees it.
        job.wait_for(lambda: glob.glob(os.path.join(d, "ckpt-*.h5")), "a first checkpoint", directory=d)
        job.wait_for(lambda: len(drtrain_ranks(d)) == 3, "3 drtrain ranks", directory=d)
        os.kill(sorted(drtrain_ranks(d))[-1], signal.SIGTERM)  # the highest pid: some rank, PS or worker
        code, out = job.finish(directory=d)
        steps = stopped_at(code, out, "external SIGTERM")
        final = os.path.join(d, f"ckpt-{steps:08d}.h5")
        if not os.path.exists(final):
            job.fail(f"external: no checkpoint after step {steps}", directory=d)
        run([self.tool, "verify", final])
        _, out = self.drtrain(3, *small, *endless, "--max-steps", str(steps + 5), "--checkpoint-dir", d, "--resume")
        expect(out, f"after {steps} updates: step {steps + 1} of {steps + 5}", "external: resume")

    def model(self):
        work = os.path.join(self.a.work, "model")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        net = os.path.join(work, "bn.model")
        with open(net, "w") as f:
            f.write("# a residual block with batch norm and dropout\n"
                    "c1 = conv2d(input) out=4 kernel=3 stride=2 bias=false\n"
                    "bn1 = batchnorm\nr1 = relu\n"
                    "c2 = conv2d out=4 kernel=3 pad=1 bias=false\nbn2 = batchnorm\n"
                    "s = add(bn2, r1)\nr2 = relu\npool = global_avgpool\ndrop = dropout p=0.2\n"
                    "fc = linear out=classes\n")
        common = ["--model", net, "--dataset", "synthetic", "--synthetic-train", "720", "--batch-size", "24",
                  "--deterministic"]
        whole, part = os.path.join(work, "whole"), os.path.join(work, "part")
        self.drtrain(3, *common, "--max-steps", "30", "--checkpoint-dir", whole, "--checkpoint-every", "30")
        self.drtrain(3, *common, "--checkpoint-dir", part, "--checkpoint-every", "10", "--max-steps", "10")
        first = os.path.join(part, f"ckpt-{10:08d}.h5")
        with h5py.File(first, "r") as f:
            assert sorted(f["state"].keys()) == ["bn1.running_mean", "bn1.running_var", "bn2.running_mean",
                                                 "bn2.running_var"], list(f["state"].keys())
            assert "bn1.running_mean" not in f["params"] and "bn1.weight" in f["params"]
            assert "bn1.running_mean" not in f["optimizer"]["momentum"], "state has no optimizer slot"
            assert f["state"]["bn1.running_var"].shape == (4,)
            assert not np.all(f["state"]["bn1.running_mean"][()] == 0), "running statistics never updated"
            definition = f.attrs["model_definition"].decode()
            assert "bn1 = batchnorm(c1)" in definition and "s = add(bn2, r1)" in definition, definition
        _, out = run([self.tool, "verify", first])
        expect(out, "checksum matches", "verify of a model with state")
        exported = os.path.join(work, "state_dict.h5")
        run([self.tool, "export", first, exported])
        with h5py.File(exported, "r") as f:
            assert "bn2.running_var" in f and "c1.weight" in f, list(f.keys())
        # Resume on another PS layout: the state travels like the parameters.
        self.drtrain(4, *common, "--max-steps", "30", "--checkpoint-dir", part, "--checkpoint-every", "30",
                     "--resume", "latest", ps=2)
        end = f"ckpt-{30:08d}.h5"
        with h5py.File(os.path.join(whole, end), "r") as a, h5py.File(os.path.join(part, end), "r") as b:
            for group in ("params", "state"):
                for name in a[group]:
                    assert np.array_equal(a[group][name][()], b[group][name][()]), f"{group}/{name} differs"

    def slow_sync(self):
        # Synchronous saves (--checkpoint-async false, and the final one) of ~70 MB that take about
        # 3.5 s (a test fault: 50 ms after each 1 MiB piece, a slow disk that makes progress) with
        # --hang-timeout 1.5: the workers waiting for the PS and the PS's own watchdog must count
        # the writing as progress (comm/liveness.hpp), so the job ends normally with both saves.
        d = os.path.join(self.a.work, "slow-sync")
        shutil.rmtree(d, ignore_errors=True)
        code, out = self.drtrain(3, "--dataset", "synthetic", "--model", "mlp:784-2048-2048-10", "--optimizer", "adam",
                                 "--batch-size", "32", "--max-steps", "20", "--checkpoint-dir", d,
                                 "--checkpoint-every", "10", "--checkpoint-async", "false", "--hang-timeout", "1.5",
                                 expect_ok=None, env=dict(os.environ, DRT_TEST_FAULT="checkpoint-slow-pieces"))
        files = sorted(os.listdir(d)) if os.path.isdir(d) else []
        if code != 0 or "ckpt-00000010.h5" not in files or "ckpt-00000020.h5" not in files:
            print(out)
            raise SystemExit(f"FAIL: slow synchronous saves: exit status {code}, {files}")

    def vanish(self):
        # The newest checkpoint disappears between PS 0's check and the PS's parallel open (test
        # fault resume-vanish moves it away): --resume skips it with a warning naming it and takes
        # the next, instead of ending the job.
        d = os.path.join(self.a.work, "vanish")
        shutil.rmtree(d, ignore_errors=True)
        small = ["--dataset", "synthetic", "--model", "mlp:784-64-10", "--checkpoint-dir", d, "--checkpoint-every", "10"]
        self.drtrain(3, *small, "--max-steps", "20", ps=2)
        _, out = self.drtrain(3, *small, "--max-steps", "30", "--resume", ps=2,
                              env=dict(os.environ, DRT_TEST_FAULT="resume-vanish"))
        expect(out, f"skipping checkpoint {d}/ckpt-00000020.h5: it could not be opened on every PS", "vanish")
        expect(out, f"resuming from {d}/ckpt-00000010.h5 after 10 updates", "vanish")

    def slow(self):
        base = os.path.join(self.a.work, "slow")
        shutil.rmtree(base, ignore_errors=True)
        args = ["--dataset", "synthetic", "--model", "mlp:784-256-256-10", "--deterministic", "--optimizer", "adam",
                "--lr", "0.001", "--epochs", "100", "--max-steps", "1500", "--checkpoint-every", "100", "--keep", "100",
                "--hang-timeout", "2", "--threads", "1"]
        ref = os.path.join(base, "sync")
        self.drtrain(3, *args, "--checkpoint-dir", ref, "--checkpoint-async", "false")
        d = os.path.join(base, "async")
        t0 = time.time()
        _, out = self.drtrain(3, *args, "--checkpoint-dir", d, env=dict(os.environ, DRT_TEST_FAULT="checkpoint-slow:100"))
        duration = time.time() - t0
        # The write of 100 lasts until training is at step 450 (the fault counts steps, not seconds:
        # a fixed 6 s write needed 100 steps to take under 5 s and 1400 to take over 6). The saves
        # due at 200, 300 and 400 each wait 1 s (half of --hang-timeout) for it and are skipped,
        # so it takes over 3 s, longer than --hang-timeout, whatever the machine's speed.
        m = re.search(r"ckpt-00000100\.h5: [0-9.]+ [KMG]iB in ([0-9.]+) s in the background", out)
        if not m or float(m.group(1)) < 3.0:
            print(out)
            raise SystemExit("FAIL: slow: no background write of the checkpoint after 100 updates that took >= 3 s")
        expect(out, "skipped the checkpoint after 200 updates: the one after 100 is still being written", "slow")
        kept = sorted(f for f in os.listdir(d) if f.startswith("ckpt-"))
        skipped = [f"ckpt-{step:08d}.h5" for step in (200, 300, 400)]
        # Training went on past the slow save: later saves happened before the last step.
        later = [f for f in kept if "ckpt-00000400.h5" < f < "ckpt-00001500.h5"]
        if ("ckpt-00000100.h5" not in kept or any(f in kept for f in skipped) or "ckpt-00001500.h5" not in kept
                or not later):
            print(out)
            raise SystemExit(f"FAIL: slow: the background run kept {kept}")
        for f in kept:  # exit 1 on any difference
            run([self.tool, "diff", os.path.join(d, f), os.path.join(ref, f)])
        print(f"slow: {len(kept)} checkpoints bitwise equal to the synchronous run's; the run took {duration:.1f} s "
              f"with a {m.group(1)} s save and --hang-timeout 2")

    def full(self):
        d = os.path.join(self.a.work, "full")
        shutil.rmtree(d, ignore_errors=True)
        cmd = self.a.mpiexec.split() + ["-n", "4", os.path.join(self.a.bin, "drtrain"), "--num-ps", "2", "--log-every",
                                        "1000", "--eval", "false", "--max-steps", "60", "--checkpoint-dir", d,
                                        "--checkpoint-every", "20"]
        code, out = run(cmd, expect_ok=False, env=dict(os.environ, DRT_TEST_FAULT="checkpoint-full:40"))
        if not re.search(r"error.*ckpt-00000040\.h5: .*(No space left on device|could not write their part)", out):
            print(out)
            raise SystemExit("FAIL: full: no error naming the checkpoint whose write failed")
        files = sorted(os.listdir(d))
        if "ckpt-00000020.h5" not in files or any(f.startswith("ckpt-") and f != "ckpt-00000020.h5" for f in files):
            raise SystemExit(f"FAIL: full: after the failed write the directory holds {files}")
        run([self.tool, "verify", os.path.join(d, "ckpt-00000020.h5")])
        _, out = run(cmd + ["--resume"])
        expect(out, f"resuming from {d}/ckpt-00000020.h5 after 20 updates: step 21", "full: --resume")
        run([self.tool, "verify", os.path.join(d, "ckpt-00000060.h5")])
        if [f for f in os.listdir(d) if f.endswith(".tmp")]:
            raise SystemExit(f"FAIL: full: temporary files left: {sorted(os.listdir(d))}")

    # ---- runs: helpers, then one method per defect (run in this order by `runs`)
    RUNS_MODEL = ["--dataset", "synthetic", "--model", "mlp:784-32-10"]

    def runs_dir(self, name):
        d = os.path.join(self.a.work, "runs", name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    def train(self, *args, expect_ok=True):
        return self.drtrain(3, *self.RUNS_MODEL, *args, expect_ok=expect_ok)

    @staticmethod
    def at(d, step):
        return os.path.join(d, f"ckpt-{step:08d}.h5")

    @staticmethod
    def digests(d):
        """{name: sha256} of the checkpoint files in d."""
        return {f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
                for f in sorted(os.listdir(d)) if f.startswith("ckpt-")}

    @staticmethod
    def attrs(path):
        with h5py.File(path, "r") as f:
            return {k: (v.decode() if isinstance(v, (bytes, np.bytes_)) else v) for k, v in f.attrs.items()}

    @staticmethod
    def refused(code, out, what, *needles):
        if code == 0 or out.count("drtrain: error:") != 1:
            print(out)
            raise SystemExit(f"FAIL: runs: {what}: exit status {code}, expected one error line and a failure")
        for needle in needles:
            expect(out, needle, f"runs: {what}")

    def unchanged(self, before, d, what):
        after = self.digests(d)
        if after != before:
            raise SystemExit(f"FAIL: runs: {what}: {d} held {sorted(before)}, now {sorted(after)}"
                             f"{' (contents changed)' if sorted(after) == sorted(before) else ''}")

    def runs(self):
        for part in (self.runs_fork, self.runs_fresh, self.runs_keep, self.runs_two_jobs, self.runs_model):
            part()
            print(f"ok: {part.__name__}")

    def runs_fork(self):
        # Run A writes 20, 30, 40; B resumes A's 20 in A's directory with --keep 1. Its checkpoints
        # would be named like A's 30 and 40 (and --keep 1 used to delete each of B's as soon as it
        # was published, and plain --resume then continued A): refused at start-up instead.
        train, ckpt, files, attrs, refused, same = (self.train, self.at, self.digests, self.attrs, self.refused,
                                                    self.unchanged)
        d = self.runs_dir("ab")
        train("--max-steps", "40", "--checkpoint-every", "10", "--checkpoint-dir", d)
        a_run = attrs(ckpt(d, 40)).get("run_id", "(none)")
        a_files = files(d)
        if sorted(a_files) != ["ckpt-00000020.h5", "ckpt-00000030.h5", "ckpt-00000040.h5"]:
            raise SystemExit(f"FAIL: runs: run A left {sorted(a_files)}")
        b_args = ["--max-steps", "50", "--checkpoint-every", "5", "--keep", "1", "--resume", ckpt(d, 20)]
        code, out = train(*b_args, "--checkpoint-dir", d, expect_ok=False)
        refused(code, out, "a resume of an older checkpoint in place", f"continues run {a_run} from step 20",
                f"run {a_run}: steps 30, 40", "another --checkpoint-dir", "move away")
        same(a_files, d, "the refused fork")
        # The same fork into a directory of its own: a new line, A's directory untouched.
        d2 = self.runs_dir("ab-fork")
        _, out = train(*b_args, "--checkpoint-dir", d2)
        expect(out, f"forks run {a_run}'s checkpoint after 20 updates, from another directory", "runs: the fork")
        same(a_files, d, "the fork into another directory")
        if sorted(files(d2)) != ["ckpt-00000050.h5"]:
            raise SystemExit(f"FAIL: runs: the fork with --keep 1 left {sorted(files(d2))}")
        b = attrs(ckpt(d2, 50))
        if b["parent_run_id"] != a_run or b["parent_step"] != 20 or b["lineage"] != f"{a_run}@20 {b['run_id']}":
            raise SystemExit(f"FAIL: runs: the fork's identity: {b}")
        # Going back in place: with A's later files moved away, B runs there and keeps its own
        # newest checkpoint (A's 20, its ancestor, goes with --keep 1), and plain --resume continues B.
        moved = self.runs_dir("ab-later")
        for step in (30, 40):
            os.rename(ckpt(d, step), ckpt(moved, step))
        _, out = train("--max-steps", "35", "--checkpoint-every", "5", "--keep", "1", "--resume", ckpt(d, 20),
                       "--checkpoint-dir", d)
        if sorted(files(d)) != ["ckpt-00000035.h5"]:
            print(out)
            raise SystemExit(f"FAIL: runs: B in place with --keep 1 left {sorted(files(d))}")
        _, out = train("--max-steps", "45", "--resume", "--checkpoint-dir", d)
        expect(out, f"resuming from {ckpt(d, 35)} after 35 updates: step 36 of 45", "runs: plain --resume after B")
        expect(out, f"continues run {attrs(ckpt(d, 35))['run_id']}'s checkpoint after 35 updates", "runs: B continued")

    def runs_fresh(self):
        # A fresh run into a used directory (it used to overwrite the files of its steps and leave
        # a mix of two runs): refused, naming the run there and its newest checkpoint.
        train, ckpt, files, attrs, refused, same = (self.train, self.at, self.digests, self.attrs, self.refused,
                                                    self.unchanged)
        used = self.runs_dir("used")
        train("--max-steps", "20", "--checkpoint-every", "10", "--checkpoint-dir", used)
        used_run, used_files = attrs(ckpt(used, 20)).get("run_id", "(none)"), files(used)
        code, out = train("--max-steps", "10", "--seed", "2", "--checkpoint-dir", used, expect_ok=False)
        refused(code, out, "a fresh run into a used directory", f"--checkpoint-dir {used} already holds checkpoints",
                f"run {used_run}: steps 10, 20", f"newest {ckpt(used, 20)}", "pass --resume",
                "another --checkpoint-dir")
        same(used_files, used, "the refused fresh run")

    def runs_keep(self):
        # --keep removes the run's own line only. U writes 10 and 20 in `shared`; B resumes Z's
        # checkpoint after 30 updates (another directory) into `shared` with --keep 1: U's files
        # stay (they used to be deleted: the directory's newest step was all --keep looked at).
        train, ckpt, files, attrs, refused = self.train, self.at, self.digests, self.attrs, self.refused
        shared, z = self.runs_dir("shared"), self.runs_dir("z")
        train("--max-steps", "20", "--checkpoint-every", "10", "--checkpoint-dir", shared)
        u_files = files(shared)
        train("--max-steps", "30", "--checkpoint-dir", z)
        train("--max-steps", "45", "--checkpoint-every", "5", "--keep", "1", "--resume", ckpt(z, 30),
              "--checkpoint-dir", shared)
        if sorted(files(shared)) != ["ckpt-00000010.h5", "ckpt-00000020.h5", "ckpt-00000045.h5"]:
            raise SystemExit(f"FAIL: runs: --keep 1 of a run resumed into a shared directory left "
                             f"{sorted(files(shared))}, expected U's 10 and 20 and the run's 45")
        for f, digest in u_files.items():
            if files(shared).get(f) != digest:
                raise SystemExit(f"FAIL: runs: U's {f} changed")
        # Plain --resume continues the run that wrote last, C; C's checkpoint damaged, it does not
        # fall back to U's (another run) but says so.
        _, out = train("--max-steps", "50", "--keep", "1", "--resume", "--checkpoint-dir", shared)
        expect(out, f"resuming from {ckpt(shared, 45)} after 45 updates", "runs: plain --resume in a shared directory")
        c_run = attrs(ckpt(shared, 50))["run_id"]
        with h5py.File(ckpt(shared, 50), "r") as f:
            offset = f["params"]["fc1.weight"].id.get_offset()
        with open(ckpt(shared, 50), "r+b") as f:
            f.seek(offset + 1000)
            data = bytearray(f.read(16))
            f.seek(offset + 1000)
            f.write(bytes(x ^ 0x5A for x in data))
        code, out = train("--max-steps", "60", "--resume", "--checkpoint-dir", shared, expect_ok=False)
        refused(code, out, "plain --resume whose line is damaged", f"skipping checkpoint {ckpt(shared, 50)}",
                f"no valid checkpoint of the line of run {c_run}", "steps 10, 20", "--resume FILE")
        if "resuming from" in out:
            print(out)
            raise SystemExit("FAIL: runs: plain --resume continued another run's checkpoint")

    def runs_two_jobs(self):
        # Two jobs on one directory: the second is refused while the first runs, naming its PS 0.
        train, ckpt, refused = self.train, self.at, self.refused
        busy = self.runs_dir("busy")
        cmd = self.a.mpiexec.split() + ["-n", "3", os.path.join(self.a.bin, "drtrain"), "--num-ps", "1", "--log-every",
                                        "1000", "--eval", "false", *self.RUNS_MODEL, "--epochs", "1000",
                                        "--checkpoint-every", "50", "--checkpoint-dir", busy]
        first = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        try:
            def published():  # (--keep 3 removes the first ones soon)
                return any(f.startswith("ckpt-") for f in os.listdir(busy))

            deadline = time.time() + 120
            while not published() and first.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            if not published():
                first.terminate()
                raise SystemExit(f"FAIL: runs: the first job published no checkpoint\n{first.communicate()[0]}")
            ranks = drtrain_ranks(busy)
            code, out = train("--max-steps", "5", "--resume", "--checkpoint-dir", busy, expect_ok=False)
            refused(code, out, "a second job on a directory in use", f"--checkpoint-dir {busy} is in use by another job",
                    os.path.join(busy, ".lock"), "another --checkpoint-dir")
            if not any(f"pid {pid}" in out for pid in ranks):
                print(out)
                raise SystemExit(f"FAIL: runs: the message names none of the first job's ranks {ranks}")
            if first.poll() is not None:
                raise SystemExit(f"FAIL: runs: the first job ended\n{first.communicate()[0]}")
            os.kill(max(ranks), signal.SIGTERM)
            out, _ = first.communicate(timeout=60)
        finally:
            if first.poll() is None:  # a check above failed: stop the first job (mpiexec passes SIGTERM on)
                first.terminate()
                try:
                    first.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    first.kill()
        if first.returncode != 75:
            print(out)
            raise SystemExit(f"FAIL: runs: the first job exited {first.returncode} on SIGTERM, expected 75")
        steps = int(re.search(r'"steps":(\d+)', out).group(1))
        _, out = train("--max-steps", str(steps + 5), "--resume", "--checkpoint-dir", busy)  # free again
        expect(out, f"resuming from {ckpt(busy, steps)} after {steps} updates", "runs: after the first job")

    def runs_model(self):
        # A checkpoint of another model: both named.
        d = self.runs_dir("model")
        self.train("--max-steps", "10", "--checkpoint-dir", d)
        code, out = self.drtrain(3, "--dataset", "synthetic", "--model", "mlp:784-16-10", "--max-steps", "50",
                                 "--resume", self.at(d, 10), expect_ok=False)
        self.refused(code, out, "another model",
                     "--model mlp:784-16-10 differs from the checkpoint's model (--model mlp:784-32-10): node line 1")


    def kill_until_done(self, args, d, duration, rng):
        """Runs the job with --resume, killing a random rank at a random moment within `duration`,
        until a run completes. Returns (runs, ranks killed, seconds the first run took)."""
        cmd = self.a.mpiexec.split() + ["-n", "3", os.path.join(self.a.bin, "drtrain"), "--num-ps", "1",
                                        "--log-every", "1000", "--eval", "false", *args, "--checkpoint-dir", d,
                                        "--resume"]
        killed, first_run_s = 0, None
        for attempt in range(40):
            t0 = time.time()
            job = Job(cmd, d + f".attempt{attempt}.log")
            delay = rng.uniform(0.05, 1.0) * duration
            try:
                job.proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                # Start-up: the ranks may not exist yet; the moment is when they do.
                job.wait_for(lambda: drtrain_ranks(d) or job.proc.poll() is not None, "drtrain ranks")
                ranks = drtrain_ranks(d)
                if ranks:
                    try:
                        os.kill(rng.choice(sorted(ranks)), signal.SIGKILL)
                        killed += 1
                    except ProcessLookupError:
                        pass
            code, _ = job.finish_killed(d)  # a hang guard: one rank killed must end the whole job
            if first_run_s is None:
                first_run_s = time.time() - t0
            if code == 0:
                return attempt + 1, killed, first_run_s
        print(job.output())
        raise SystemExit(f"FAIL: kill: {d}: no run completed in 40 attempts")

    def kill(self):
        base = os.path.join(self.a.work, "kill")
        shutil.rmtree(base, ignore_errors=True)
        args = ["--dataset", "synthetic", "--model", "mlp:784-256-256-10", "--deterministic", "--optimizer", "adam",
                "--lr", "0.001", "--max-steps", "300", "--checkpoint-every", "7", "--keep", "2", "--threads", "1"]
        ref = os.path.join(base, "ref")
        t0 = time.time()
        self.drtrain(3, *args, "--checkpoint-dir", ref)
        duration = time.time() - t0
        ref_final = os.path.join(ref, "ckpt-00000300.h5")
        rng = random.Random(self.a.seed)
        kills = 0
        for trial in range(self.a.trials):
            # A trial counts once a rank was killed in it. Its first run starts from scratch, so
            # when that run ends before its kill (the reference run was slower than this one: a
            # loaded machine), the trial starts again with delays scaled to that run's length.
            for _ in range(5):
                d = os.path.join(base, f"trial{trial}")
                shutil.rmtree(d, ignore_errors=True)
                attempts, killed, first_run_s = self.kill_until_done(args, d, duration, rng)
                kills += killed
                if killed:
                    break
                print(f"trial {trial}: the run ended after {first_run_s:.1f} s, before its kill (the reference "
                      f"took {duration:.1f} s): again, with delays within {first_run_s:.1f} s")
                duration = first_run_s
            else:
                raise SystemExit(f"FAIL: kill: trial {trial}: every run ended before its kill, 5 times")
            run([self.tool, "diff", os.path.join(d, "ckpt-00000300.h5"), ref_final])  # exit 1 on any difference
            print(f"trial {trial}: {attempts} run(s), final checkpoint bitwise equal to the uninterrupted run")
        print(f"kill: {kills} rank(s) killed over {self.a.trials} trial(s)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--trials", type=int, default=2, help="kill: trials (each killed and resumed until done)")
    p.add_argument("--seed", type=int, default=None, help="kill: the random seed (default: a fresh one, printed)")
    p.add_argument("case", choices=["fixture", "h5py", "h5dump", "tool", "bad", "crash", "preempt", "slow", "full", "model",
                                    "runs", "vanish", "slow-sync", "kill"])
    a = p.parse_args()
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 30)
    print(f"seed {a.seed}")
    case = Case(a)
    getattr(case, {"tool": "tool_case"}.get(a.case, a.case.replace("-", "_")))()
    print(f"ok: {a.case}")


if __name__ == "__main__":
    main()
