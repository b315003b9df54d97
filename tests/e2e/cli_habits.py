#!/usr/bin/python3
"""The everyday surface a new user meets (issue 34), end to end on the real programs (run by ctest).

usage: cli_habits.py --bin BUILD/bin --mpiexec "mpiexec --oversubscribe ..." --work DIR CASE
CASE:
  tools   drtrain, drtrain-ckpt, drtrain-data (and their subcommands) and drtrain-plan answer --help and
          --version alike: exit 0, the help or "TOOL VERSION" on stdout, one version for all
  plan    drtrain-plan at 1024 nodes prints the ring allreduce, a recommendation and that it
          extrapolates beyond the 256 nodes SimGrid confirmed; --json ends with the recommendation; bad
          usage (no --params, 1 node, an unknown testbed or wire) exits 2 naming the option
  check   drtrain --check / --dry-run on one process without mpirun: the layout, the parameter
          count, each role's memory; a job no node of this kind can hold (a batch of 4 million
          samples of the CNN) exits 1 from --check, and the real run under mpiexec is refused on
          every rank with the estimate and what to change, before it allocates (no OOM, no hang)
  eval    --eval false: the summary's test figures are null (not 0) and the set-up line says no
          test set is used; a data file without /test is refused at start-up naming --test-file
  ckpt    drtrain-ckpt diff of a file with itself says "identical" in one line; info of the last
          checkpoint of a 2-epoch run says "2 done", not "epoch 3, step 1"
  resume  a resumed run keeps its history: --metrics is appended, every record names its run
          segment (0, then 1), the new segment starts with a record of where it resumed, and
          scripts/plot_metrics.py plots the whole file; --timeline of segment 1 goes to
          FILE.segment-1.json beside FILE. Resume compares what matters: the same model file by its
          absolute path resumes; the file edited is refused naming the line that differs; another
          data file is refused naming the sample counts and file headers that differ
  flags   a job script's flag given again on its command line wins (jobs/local_mpirun.sh passes
          --config, the user's --lr and --max-steps after it); --print-config shows the last value
"""
import argparse
import glob
import json
import os
import shutil

from e2e_util import expect, run


class Case:
    def __init__(self, a):
        self.a = a
        self.bin = lambda name: os.path.join(a.bin, name)

    def mpi(self, ranks, *args, expect_ok=True):
        cmd = self.a.mpiexec.split() + ["-n", str(ranks), self.bin("drtrain"), "--num-ps", "1", "--log-every",
                                        "1000"] + list(args)
        return run(cmd, expect_ok)

    def tools(self):
        versions = set()
        for cmd in (["drtrain"], ["drtrain-ckpt"], ["drtrain-ckpt", "diff"], ["drtrain-data"],
                    ["drtrain-data", "convert"], ["drtrain-data", "info"], ["drtrain-plan"]):
            _, out = run([self.bin(cmd[0])] + cmd[1:] + ["--help"])
            expect(out, "usage", " ".join(cmd) + " --help")
            _, out = run([self.bin(cmd[0])] + cmd[1:] + ["--version"])
            first = out.strip().splitlines()[0].split()
            assert first[0] == cmd[0], f"{' '.join(cmd)} --version printed {out!r}: expected '{cmd[0]} VERSION'"
            versions.add(first[1])
        assert len(versions) == 1, f"the tools report different versions: {versions}"

    def plan(self):
        # A plan names its recommendation and what it extrapolates; bad usage exits 2 naming the option.
        _, out = run([self.bin("drtrain-plan"), "--params", "124M", "--nodes", "1024", "--gbit", "100"])
        for needle in ("ring allreduce over the 1024 nodes", "recommended: --rma-sync", "beyond the 256 where SimGrid confirmed"):
            expect(out, needle, "drtrain-plan at 1024 nodes")
        _, out = run([self.bin("drtrain-plan"), "--params", "2M", "--nodes", "8", "--json"])
        last = json.loads(out.strip().splitlines()[-1])
        assert last["nodes"] == 8 and last["best"].startswith("--rma-sync"), f"drtrain-plan --json ended with {last}"
        for bad, needle in ((["--nodes", "8"], "--params"), (["--params", "1M", "--nodes", "1"], "--nodes 1"),
                            (["--params", "1M", "--nodes", "8", "--testbed", "cloud"], "cloud"),
                            (["--params", "1M", "--nodes", "8", "--wire", "fp8"], "--wire")):
            code, out = run([self.bin("drtrain-plan")] + bad, expect_ok=False)
            assert code == 2, f"drtrain-plan {' '.join(bad)} exited {code}, expected 2"
            expect(out, needle, "drtrain-plan " + " ".join(bad))

    def check(self):
        _, out = run([self.bin("drtrain"), "--check"])
        for needle in ("1 PS + 1 worker(s)", "535818 parameters", "memory    per worker", "memory    per PS",
                       "all 2 ranks on one node"):
            expect(out, needle, "drtrain --check")
        _, out = run([self.bin("drtrain"), "--dry-run", "--num-ps", "2", "--expect-ranks", "6", "--model", "cnn"])
        expect(out, "6 (--expect-ranks): 2 PS + 4 worker(s)", "drtrain --dry-run --expect-ranks 6")
        huge = ["--model", "cnn", "--dataset", "synthetic", "--synthetic-train", "1000", "--synthetic-shape", "1x28x28",
                "--batch-size", "4000000"]
        _, out = run([self.bin("drtrain"), "--check"] + huge, expect_ok=False)
        expect(out, "TOO LARGE", "drtrain --check of a job no node can hold")
        _, out = self.mpi(3, "--eval", "false", *huge, expect_ok=False)
        expect(out, "this job needs about", "a training run too large for the node")
        expect(out, "lower --batch-size", "a training run too large for the node")
        assert "step 1" not in out, "the run too large for the node trained before it was refused"

    def eval_case(self):
        metrics = os.path.join(self.a.work, "noeval.jsonl")
        _, out = self.mpi(2, "--dataset", "synthetic", "--synthetic-train", "256", "--max-steps", "3", "--eval",
                          "false", "--metrics", metrics)
        expect(out, "no test (--eval false)", "the data line of a run with --eval false")
        with open(metrics) as f:
            summary = [json.loads(line) for line in f if '"summary"' in line][-1]
        for key in ("test_accuracy", "test_loss"):
            assert key in summary and summary[key] is None, f"--eval false: summary {key} = {summary.get(key)!r}, " \
                                                            "expected null (nothing was measured)"
        notest = os.path.join(self.a.work, "notest.h5")
        run([self.bin("drtrain-data"), "synth", notest, "--count", "64", "--shape", "1,8,8"])
        _, out = self.mpi(2, "--dataset", "hdf5", "--data-file", notest, "--model", "mlp:64-10", "--max-steps", "2",
                          expect_ok=False)
        expect(out, "has no /test split to evaluate on: pass --test-file FILE", "a data file without /test")
        self.mpi(2, "--dataset", "hdf5", "--data-file", notest, "--model", "mlp:64-10", "--max-steps", "2", "--eval",
                 "false")

    def ckpt(self):
        d = os.path.join(self.a.work, "ckpt")
        self.mpi(2, "--dataset", "synthetic", "--synthetic-train", "256", "--synthetic-shape", "1x8x8", "--model",
                 "mlp:64-10", "--batch-size", "64", "--epochs", "2", "--eval", "false", "--checkpoint-dir", d)
        last = sorted(glob.glob(os.path.join(d, "ckpt-*.h5")))[-1]
        _, out = run([self.bin("drtrain-ckpt"), "diff", last, last])
        lines = out.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("identical: all") and lines[0].endswith("bitwise equal"), \
            f"diff of a file with itself printed {out!r}: expected one line 'identical: all N tensors bitwise equal'"
        _, out = run([self.bin("drtrain-ckpt"), "info", last])
        expect(out, "epoch            2 done (a resumed run starts epoch 3)", "info of a 2-epoch run's last checkpoint")

    def resume(self):
        w = self.a.work
        model = os.path.join(w, "net.model")
        with open(model, "w") as f:
            f.write("fc1 = linear(input) out=32\nr = relu\nfc2 = linear out=classes\n")
        a, b = os.path.join(w, "a.h5"), os.path.join(w, "b.h5")
        run([self.bin("drtrain-data"), "synth", a, "--count", "256", "--shape", "1,8,8", "--test-count", "64"])
        run([self.bin("drtrain-data"), "synth", b, "--count", "512", "--shape", "1,8,8", "--test-count", "64", "--seed",
             "3"])
        metrics, trace, ck = (os.path.join(w, n) for n in ("m.jsonl", "trace.json", "ck"))
        common = ["--dataset", "hdf5", "--batch-size", "32", "--eval-every", "4", "--checkpoint-dir", ck,
                  "--checkpoint-every", "4", "--metrics", metrics, "--timeline", trace, "--log-every", "2"]
        os.chdir(w)  # the first run names the model file relatively, the resumed one absolutely
        self.mpi(2, *common, "--data-file", a, "--model", "net.model", "--max-steps", "6")
        _, out = self.mpi(2, *common, "--data-file", a, "--model", model, "--max-steps", "8", "--resume")
        expect(out, "resuming from", "the same model file by its absolute path")
        with open(metrics) as f:
            records = [json.loads(line) for line in f]
        segments = [r.get("segment") for r in records]
        assert segments[0] == 0 and segments[-1] == 1 and sorted(set(segments)) == [0, 1], \
            f"the metrics file after a resume: segments {segments}, expected the first run's records (0) then 1"
        starts = [r for r in records if r.get("start")]
        assert len(starts) == 2 and starts[1]["resumed_from"].endswith("ckpt-00000006.h5"), starts
        assert sum(1 for r in records if r.get("summary")) == 2, "both runs' summaries are kept"
        assert any(r.get("eval") and r["segment"] == 0 and r["step"] == 4 for r in records), \
            "the first run's evaluation at step 4 was lost"
        assert os.path.exists(trace) and os.path.exists(os.path.join(w, "trace.segment-1.json")), os.listdir(w)
        run(["/usr/bin/python3", os.path.join(self.a.root, "scripts/plot_metrics.py"), metrics,
             os.path.join(w, "m.png")])
        assert os.path.getsize(os.path.join(w, "m.png")) > 0
        with open(model, "a") as f:
            f.write("# edited\n")
        with open(model) as f:
            text = f.read().replace("out=32", "out=48")
        with open(model, "w") as f:
            f.write(text)
        _, out = self.mpi(2, *common, "--data-file", a, "--model", model, "--max-steps", "10", "--resume",
                          expect_ok=False)
        expect(out, "differs from the checkpoint's model", "an edited model file")
        expect(out, "'fc1 = linear(input) out=48' here and 'fc1 = linear(input) out=32' in the checkpoint",
               "an edited model file")
        with open(model, "w") as f:
            f.write(text.replace("out=48", "out=32"))  # the model restored: the data alone differs
        _, out = self.mpi(2, *common, "--data-file", b, "--model", model, "--max-steps", "10", "--resume",
                          expect_ok=False)
        expect(out, "the training data differs from the checkpoint's run: 512 train samples here, 256 train samples "
               "in the checkpoint's run; file header", "another data file")

    def flags(self):
        _, out = run([self.bin("drtrain"), "--config", os.path.join(self.a.root, "jobs/configs/mlp.ini"), "--lr", "0.01",
                      "--lr", "0.02", "--epochs", "1", "--epochs", "2", "--print-config"])
        expect(out, "lr = 0.02\n", "--print-config after --lr given twice")
        expect(out, "epochs = 2\n", "--print-config after --epochs given twice")
        if "mpich" in self.a.mpiexec:  # the job script launches with the default mpiexec (Open MPI's here)
            print("flags: jobs/local_mpirun.sh not run: this pass builds against MPICH")
            return
        env = dict(os.environ, DRT_BUILD=os.path.dirname(os.path.abspath(self.a.bin)))
        _, out = run([os.path.join(self.a.root, "jobs/local_mpirun.sh"), "3", "jobs/configs/mlp.ini",
                      "--max-steps", "2", "--max-steps", "3", "--eval", "false", "--print-config"], env=env)
        expect(out, "max-steps = 3\n", "jobs/local_mpirun.sh with --max-steps given twice")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("case", choices=["tools", "plan", "check", "eval", "ckpt", "resume", "flags"])
    a = p.parse_args()
    a.root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    a.work = os.path.join(a.work, a.case)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    case = Case(a)
    {"tools": case.tools, "plan": case.plan, "check": case.check, "eval": case.eval_case, "ckpt": case.ckpt, "resume": case.resume,
     "flags": case.flags}[a.case]()
    print(f"PASS: {a.case}")


if __name__ == "__main__":
    main()
