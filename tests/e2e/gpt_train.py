#!/usr/bin/python3
"""GPT language models end to end on real text (tests/CMakeLists.txt, gpt_train.*).

The corpus is Python's documentation as the Debian package python3.11-doc installs it, converted
by drtrain-data into a byte-level token set (scripts/make_text_corpus.sh does the same).

  fixture  converts the corpus (DIR/pydoc.h5) and writes the bad token files
  learn    gpt:2-2-64 at context 64, 1 PS + 2 workers, AdamW with warm-up and cosine decay, 120
           steps: the test loss falls from ln 256 = 5.55 nats (uniform) below 3.3, and the
           progress lines report tokens/s, perplexity, model GFLOP/s and MFU (--peak-tflops)
  resume   --deterministic, 2 PS + 2 workers x 2 towers: a run stopped by SIGTERM after step 12
           (exit 75) and resumed ends bitwise where an uninterrupted 30-step run ends; the step-12
           checkpoint also resumes on another layout (1 PS + 1 worker); the export of the tied
           model holds lm_head.weight as a link to transformer.wte.weight (nanoGPT's state_dict)
  modes    --overlap, --wire bf16, --sync-mode async / ssp:2 / backup:1: 25 steps each, the loss
           falls below its start and is finite
  bad      a token id >= vocab_size, --context longer than the model's position table, a corpus
           shorter than one window, --context on an image set, a token set without --context:
           each one error line naming the problem, non-zero exit, no hang

usage: gpt_train.py --bin BUILD/bin --mpiexec "mpiexec FLAGS" --work DIR CASE
"""
import argparse
import json
import os
import re
import shutil
import subprocess

import h5py
import numpy as np

from e2e_util import expect, run

CORPUS = "/usr/share/doc/python3.11/html/_sources"
SMALL = ["--model", "gpt:2-2-32", "--context", "32", "--optimizer", "adamw", "--lr", "3e-3", "--eval", "false"]


class Case:
    def __init__(self, a):
        self.a = a
        self.data = os.path.join(a.work, "pydoc.h5")

    def drtrain(self, ranks, *args, expect_ok=True, env=None, ps=1, timeout=300):
        cmd = self.a.mpiexec.split() + ["-n", str(ranks), os.path.join(self.a.bin, "drtrain"), "--num-ps", str(ps),
                                        "--dataset", "hdf5", "--data-file", self.data] + [str(x) for x in args]
        environment = dict(os.environ)
        environment.update(env or {})
        return run(cmd, expect_ok, env=environment, timeout=timeout)

    def summary(self, out):
        lines = [json.loads(x) for x in out.splitlines() if x.startswith('{"summary":true')]
        if not lines:
            print(out)
            raise SystemExit("FAIL: no summary line")
        return lines[-1]

    def losses(self, out):
        return [float(x) for x in re.findall(r"\)  loss (\d+\.\d+)  ppl", out)]

    def fixture(self):
        if not os.path.isdir(CORPUS):
            raise SystemExit(f"FAIL: {CORPUS} is missing: scripts/install_deps.sh installs python3.11-doc")
        shutil.rmtree(self.a.work, ignore_errors=True)
        os.makedirs(self.a.work)
        run([os.path.join(self.a.bin, "drtrain-data"), "convert", "--text", CORPUS, "--test-fraction", "0.05",
             self.data])
        bad = os.path.join(self.a.work, "bad")
        os.makedirs(bad)
        with h5py.File(os.path.join(bad, "out_of_vocab.h5"), "w") as f:  # token 200 in a vocabulary of 100
            f.attrs["drtrain_dataset"] = 1
            f.attrs["vocab_size"] = 100
            tokens = np.arange(4000, dtype=np.uint8) % 100
            tokens[::7] = 200  # in every window of the first step
            f.create_dataset("train/tokens", data=tokens)
            f.create_dataset("test/tokens", data=tokens[:500])
        with h5py.File(os.path.join(bad, "short.h5"), "w") as f:  # 40 tokens: not one window of 64 + 1
            f.attrs["drtrain_dataset"] = 1
            f.attrs["vocab_size"] = 256
            f.create_dataset("train/tokens", data=np.arange(40, dtype=np.uint8))
            f.create_dataset("test/tokens", data=np.arange(40, dtype=np.uint8))

    def learn(self):
        _, out = self.drtrain(3, "--model", "gpt:2-2-64", "--context", "64", "--optimizer", "adamw", "--lr", "3e-3",
                              "--lr-schedule", "cosine", "--warmup-steps", "10", "--min-lr", "3e-4",
                              "--batch-size", "16", "--max-steps", "120", "--log-every", "40",
                              "--test-samples", "400", "--peak-tflops", "0.05")
        s = self.summary(out)
        print({k: s.get(k) for k in ("test_loss", "test_perplexity", "tokens_per_s", "model_tflops", "mfu")})
        # MFU: the model's FLOP/s over the peak of every tower (2 workers x 1 tower x 0.05 TFLOP/s)
        if not abs(s["mfu"] - s["model_tflops"] / (2 * 0.05)) <= 1e-9 * s["mfu"] or not s["mfu"] > 0:
            raise SystemExit(f"FAIL: mfu {s['mfu']} is not model_tflops {s['model_tflops']} / (2 x 0.05)")
        if len(re.findall(r"GFLOP/s, MFU \d+\.\d%\)", out)) != 3:
            print(out)
            raise SystemExit("FAIL: each of the 3 progress lines should end its rate with ', MFU N.N%)'")
        if not s["test_loss"] < 3.3:
            print(out)
            raise SystemExit(f"FAIL: gpt:2-2-64 after 120 steps: test loss {s['test_loss']} (expected < 3.3; "
                             f"uniform is 5.55)")
        if abs(s["test_perplexity"] - np.exp(s["test_loss"])) > 1e-6 * s["test_perplexity"]:
            raise SystemExit(f"FAIL: test_perplexity {s['test_perplexity']} is not exp(test_loss {s['test_loss']})")
        for needle in ("tokens/s (", "GFLOP/s", "  ppl ", "token windows of --context 64", "final test: loss"):
            expect(out, needle, "the language model's report")
        losses = self.losses(out)
        if len(losses) != 3 or not losses[0] > losses[-1]:
            raise SystemExit(f"FAIL: training loss per interval {losses} (expected 3 intervals, falling)")

    def resume(self):
        work = os.path.join(self.a.work, "resume")
        shutil.rmtree(work, ignore_errors=True)
        common = SMALL + ["--log-every", "1000", "--deterministic", "--towers", "2", "--batch-size", "16", "--max-steps", "30"]
        ref = os.path.join(work, "ref")
        self.drtrain(4, *common, "--checkpoint-dir", ref, ps=2)
        d = os.path.join(work, "stopped")
        # World rank 2 is worker 0 (ranks 0 and 1 are the PS); the stop is agreed on step 12.
        code, out = self.drtrain(4, *common, "--checkpoint-dir", d, "--checkpoint-every", "6", "--keep", "10",
                                 expect_ok=None, env={"DRT_TEST_FAULT": "signal:2:9"}, ps=2)
        m = re.search(r'"steps":(\d+)', out)
        if code != 75 or not m:
            print(out)
            raise SystemExit(f"FAIL: the stopped run exited {code} (expected 75)")
        stopped = int(m.group(1))
        _, out = self.drtrain(4, *common, "--checkpoint-dir", d, "--resume", ps=2)
        expect(out, f"after {stopped} updates: step {stopped + 1} of 30", "resume")
        final = f"ckpt-{30:08d}.h5"
        run([os.path.join(self.a.bin, "drtrain-ckpt"), "diff", os.path.join(d, final), os.path.join(ref, final),
             "--rtol", "0"])
        # The export of the tied model holds the head under nanoGPT's name too, as one tensor.
        exported = os.path.join(work, "state_dict.h5")
        run([os.path.join(self.a.bin, "drtrain-ckpt"), "export", os.path.join(d, final), exported])
        with h5py.File(exported, "r") as f:
            if "lm_head.weight" not in f or f["lm_head.weight"] != f["transformer.wte.weight"]:
                raise SystemExit(f"FAIL: the export's lm_head.weight is not a link to transformer.wte.weight: "
                                 f"{sorted(f)}")
        # Another layout: 1 PS + 1 worker with 1 tower reads the 2-PS checkpoint (resharded).
        other = os.path.join(work, "other")
        os.makedirs(other)
        mid = os.path.join(d, f"ckpt-{6:08d}.h5")
        _, out = self.drtrain(2, *[x for x in common if x not in ("--towers", "2")], "--towers", "1",
                              "--checkpoint-dir", other, "--resume", mid)
        expect(out, "after 6 updates: step 7 of 30", "resume on another layout")
        if not os.path.exists(os.path.join(other, final)):
            raise SystemExit(f"FAIL: the other layout wrote {sorted(os.listdir(other))}")

    def modes(self):
        for flags, ranks, ps in ((["--overlap", "true"], 3, 1), (["--wire", "bf16"], 3, 1),
                                 (["--sync-mode", "async"], 4, 2), (["--sync-mode", "ssp:2"], 3, 1),
                                 (["--sync-mode", "backup:1", "--batch-size", "24"], 4, 1)):
            batch = [] if "--batch-size" in flags else ["--batch-size", "16"]
            _, out = self.drtrain(ranks, *SMALL, *batch, "--max-steps", "25", "--log-every", "5", *flags, ps=ps)
            losses = self.losses(out)
            print(" ".join(flags), losses)
            if len(losses) < 2 or not all(np.isfinite(losses)) or not losses[-1] < losses[0]:
                print(out)
                raise SystemExit(f"FAIL: {' '.join(flags)}: the training loss per interval was {losses}")

    def bad(self):
        bad = os.path.join(self.a.work, "bad")
        cases = [  # (data file or None for the corpus, extra flags, expected message)
            (os.path.join(bad, "out_of_vocab.h5"), ["--context", "16"],
             r"token .*200.* (vocab_size|vocabulary) 100"),
            (None, ["--model", "gpt:2-2-32-16", "--context", "32"], r"context.*32.*16|16.*context.*32"),
            (os.path.join(bad, "short.h5"), ["--context", "64"], r"40 tokens.*(shorter than one window|--context)"),
            (None, ["--context", "0"], r"holds a token stream: pass --context T"),
        ]
        for data, flags, pattern in cases:
            args = ([] if "--model" in flags else ["--model", "gpt:2-2-32"]) + [
                "--batch-size", "4", "--max-steps", "3", "--eval", "true", "--hang-timeout", "30"] + flags
            cmd = self.a.mpiexec.split() + ["-n", "2", os.path.join(self.a.bin, "drtrain"), "--num-ps", "1",
                                            "--dataset", "hdf5", "--data-file", data or self.data] + args
            code, out = run(cmd, expect_ok=False, timeout=120)
            if not re.search(pattern, out) or out.count("drtrain: error:") + out.count("fatal error") < 1:
                print(out)
                raise SystemExit(f"FAIL: {flags}: no error matching '{pattern}'")
        code, out = run(self.a.mpiexec.split() + ["-n", "2", os.path.join(self.a.bin, "drtrain"), "--num-ps", "1",
                                                  "--dataset", "synthetic", "--context", "16", "--max-steps", "1"],
                        expect_ok=False, timeout=120)
        expect(out, "--context is for token data sets", "--context on an image set")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("case", choices=["fixture", "learn", "resume", "modes", "bad"])
    a = p.parse_args()
    getattr(Case(a), a.case)()
    print(f"gpt_train {a.case}: passed")


if __name__ == "__main__":
    main()
