#!/usr/bin/python3
"""drtrain's GPT training equals PyTorch's (issue 33, "Done when: Equals PyTorch"); tests/CMakeLists.txt,
gpt_torch.*.

drtrain trains a small GPT on Python's documentation (the gpt_train fixture's pydoc.h5) on 2 PS +
2 workers x 2 towers for 3 steps, AdamW with weight decay, linear warm-up then cosine decay,
saving its initial state (--checkpoint-start) and every step. bench/peers/torch_gpt.py (nanoGPT's
model in PyTorch, float64, an explicit masked softmax) loads ckpt 0, replays the 3 steps on the
same windows (`drtrain-data plan`) with drtrain's dropout masks and torch.optim.AdamW, and
compares every parameter and both Adam moments with drtrain's ckpt 3, per tensor, as
max |torch - drtrain| / max |drtrain|. Why that measure: one number per tensor, relative to the
tensor's own scale (the moments span many orders of magnitude between tensors), not blown up by
elements near zero (zero-initialised biases, cancelling gradients) as an element-wise relative
difference would be. The limit is 1e-5 (a 1% error in the weight decay moves the parameters by
about that much; the control shows a wrong beta2 fails). The moments meet it as they are
(measured <= 1e-6). The parameters meet it except where AdamW divides float32's rounding of a
gradient by a tiny gradient scale (sqrt(v_hat) + eps): the key third of c_attn's bias, whose exact
gradient is 0, and the odd weight whose gradient is near eps. PyTorch's own float32 training
parts from float64 there just as much, so those elements get an allowance of float32 rounding
(1e-6 of the tensor's largest gradient) through Adam's step, computed by the reference from its
own v_hat (torch_gpt.py, ROUNDING); the test prints how many elements needed it (about 65 of
40,000: the 64 key biases and one weight).

  venv     creates the PyTorch venv if missing (bench/peers/make_venv.sh: torch, numpy, h5py from
           PyPI, several GiB; DRT_PEER_VENV=DIR, default the source tree's build/peer-venv) and prints how long it
           took; exit 77 (Skipped) with the reason when it cannot (offline)
  start    --checkpoint-start: ckpt-00000000.h5 of a fresh run holds the initial state (step 0,
           zero moments, layer norms at 1 and biases at 0); a 3-step run resumed from it ends
           bitwise where a fresh 3-step run ends (--deterministic); a resumed run does not save
           a start; --checkpoint-start without --checkpoint-dir is refused. No PyTorch needed.
  dropout  (a) dropout on (embedding/residual 0.1, attention 0.2), an untied head: equal
  tied     (b) dropout off, the head tied to the token embedding: equal; and drtrain-ckpt export's
           file loads into nanoGPT's model with load_state_dict(strict=True)
  control  (c) the same run as (b): the reference with the right beta2 passes, with beta2 = 0.998
           instead of 0.999 it must fail: the comparison can fail

The cases that need PyTorch exit 77 (Skipped) when the venv is missing or broken.

Every case clips (drtrain --grad-clip, torch clip_grad_norm_, acting at every step: gradient norms
1.6 to 31) and decays only the matrices (drtrain's default --decay-rule matrices).

usage: gpt_torch.py --bin BUILD/bin --mpiexec "mpiexec FLAGS" --work DIR --data pydoc.h5 --venv DIR CASE
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

from e2e_util import expect, run

GRAD_CLIP = 1.0  # nanoGPT's; below the gradient norms of these runs (1.6 to 31), so that the clip acts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = os.path.join(ROOT, "bench", "peers", "torch_gpt.py")
MAKE_VENV = os.path.join(ROOT, "bench", "peers", "make_venv.sh")
MODEL_FILE = os.path.join(ROOT, "models", "gpt2.model")
SKIP = 77
TOLERANCE = 1e-5
CONTEXT, BATCH, STEPS = 32, 8, 3
OPTIMIZER = {"lr": "3e-3", "min-lr": "3e-4", "warmup-steps": "1", "lr-schedule": "cosine", "weight-decay": "0.1",
             "beta1": "0.9", "beta2": "0.999"}


# Run by the venv's python: argv = [peers dir, a checkpoint (for the config), the exported file].
STRICT_LOAD = """
import sys
import h5py, numpy as np, torch
sys.path.insert(0, sys.argv[1])
import torch_gpt
model = torch_gpt.build_model(torch_gpt.config_from_checkpoint(torch_gpt.read_checkpoint(sys.argv[2])))
with h5py.File(sys.argv[3], "r") as f:
    state = {k: torch.from_numpy(f[k][()]) for k in f}
model.load_state_dict(state, strict=True)
assert model.lm_head.weight is model.transformer.wte.weight
assert np.array_equal(model.lm_head.weight.detach().numpy(), state["transformer.wte.weight"].numpy())
print(f"strict load: ok, {len(state)} tensors, lm_head.weight is transformer.wte.weight")
"""


class Case:
    def __init__(self, a):
        self.a = a
        self.venv = os.environ.get("DRT_PEER_VENV") or a.venv
        self.python = os.path.join(self.venv, "bin", "python")

    # ---- the venv
    def venv_ready(self):
        if not os.path.exists(self.python):
            return f"{self.python} does not exist"
        p = subprocess.run([self.python, "-c", "import torch, numpy, h5py; print(torch.__version__)"],
                           capture_output=True, text=True)
        return None if p.returncode == 0 else f"{self.python} cannot import torch, numpy and h5py: " \
                                              f"{p.stderr.strip().splitlines()[-1:]}"

    def need_venv(self):
        why = self.venv_ready()
        if why:
            print(f"SKIP: no PyTorch venv ({why}); the test gpt_torch.venv or "
                  f"DRT_PEER_VENV={self.venv} bench/peers/make_venv.sh creates it")
            sys.exit(SKIP)

    def venv_case(self):
        why = self.venv_ready()
        if not why:
            print(f"venv {self.venv}: ready")
            return
        print(f"venv {self.venv}: {why}; creating it with bench/peers/make_venv.sh (torch, numpy, h5py from "
              f"PyPI, several GiB)", flush=True)
        t0 = time.monotonic()
        env = dict(os.environ, DRT_PEER_VENV=self.venv)
        try:
            p = subprocess.run(["bash", MAKE_VENV], capture_output=True, text=True, env=env,
                               timeout=self.a.venv_timeout)
            code, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired:
            code, out = "timeout", f"more than {self.a.venv_timeout} s"
        took = time.monotonic() - t0
        why = self.venv_ready() if code == 0 else None
        if code != 0 or why:
            tail = "\n".join(str(out).strip().splitlines()[-8:])
            print(f"SKIP: make_venv.sh ended {code} after {took:.0f} s{': ' + why if why else ''} (offline? PyPI "
                  f"unreachable?); its last lines:\n{tail}")
            sys.exit(SKIP)
        print(f"venv {self.venv}: created in {took:.0f} s")

    # ---- drtrain
    def drtrain(self, model, ckpt_dir, *extra, expect_ok=True):
        cmd = self.a.mpiexec.split() + [
            "-n", "4", os.path.join(self.a.bin, "drtrain"), "--num-ps", "2", "--towers", "2",
            "--dataset", "hdf5", "--data-file", self.a.data, "--context", str(CONTEXT), "--model", model,
            "--batch-size", str(BATCH), "--max-steps", str(STEPS), "--optimizer", "adamw", "--seed", "5",
            "--eval", "false", "--log-every", "1", "--deterministic", "--hang-timeout", "120",
            "--checkpoint-dir", ckpt_dir] + [f"--{k}={v}" for k, v in OPTIMIZER.items()] + list(extra)
        return run(cmd, expect_ok, timeout=300)

    def dropout_model(self):
        """gpt2.model at L=2, H=2, D=32, with dropout (0.1 residual/embedding, 0.2 attention) and an
        untied head."""
        with open(MODEL_FILE) as f:
            text = f.read()
        for name, value in (("L", 2), ("H", 2), ("D", 32), ("C", 0), ("P", 0.1)):
            text, n = re.subn(rf"^let {name} = \S+", f"let {name} = {value}", text, flags=re.M)
            assert n == 1, name
        text = text.replace("let P = 0.1", "let P = 0.1\nlet A = 0.2")
        text, n = re.subn(r"attention heads=\{H\} dropout=\{P\}", "attention heads={H} dropout={A}", text)
        assert n == 1
        text, n = re.subn(r"lm_head = linear out=classes bias=false tie=transformer.wte",
                          "lm_head = linear out=classes bias=false", text)
        assert n == 1
        path = os.path.join(self.a.work, "gpt_dropout.model")
        with open(path, "w") as f:
            f.write(text)
        return path

    def train(self, name, model, clip):
        d = os.path.join(self.a.work, name)
        shutil.rmtree(d, ignore_errors=True)
        extra = ["--checkpoint-start", "true", "--checkpoint-every", "1", "--keep", "10"]
        if clip:
            extra += ["--grad-clip", str(GRAD_CLIP), "--decay-rule", "matrices"]
        _, out = self.drtrain(model, d, *extra)
        names = sorted(x for x in os.listdir(d) if x.startswith("ckpt-"))
        if names != [f"ckpt-{s:08d}.h5" for s in range(STEPS + 1)]:
            print(out)
            raise SystemExit(f"FAIL: {d} holds {names}, expected ckpt 0..{STEPS}")
        return d

    def reference(self, d, clip, **override):
        opt = dict(OPTIMIZER, **{k.replace("_", "-"): str(v) for k, v in override.items()})
        cmd = [self.python, REFERENCE, "reference", "--init", os.path.join(d, "ckpt-00000000.h5"),
               "--data", self.a.data, "--context", str(CONTEXT), "--batch-size", str(BATCH), "--steps", str(STEPS),
               "--compare", os.path.join(d, f"ckpt-{STEPS:08d}.h5"), "--tolerance", str(TOLERANCE),
               "--drtrain-data", os.path.join(self.a.bin, "drtrain-data"), "--threads", "2"]
        cmd += [f"--{k}={v}" for k, v in opt.items()]
        if clip:
            cmd += ["--grad-clip", str(GRAD_CLIP), "--decay-rule", "matrices"]
        code, out = run(cmd, expect_ok=None, timeout=600)
        lines = [x for x in out.splitlines() if x.startswith('{"reference"')]
        if not lines or code not in (0, 1):
            print(out)
            raise SystemExit(f"FAIL: the reference exited {code} without its result")
        result = json.loads(lines[-1])
        if result.get("equal") != (code == 0):
            raise SystemExit(f"FAIL: the reference's verdict {result.get('equal')} and its exit status {code} differ")
        return result

    def report(self, what, r):
        m = r["max"]
        per_tensor = r["amplified"]["per_tensor"]
        if len(per_tensor) > 4:
            per_tensor = f"in {len(per_tensor)} tensors"
        print(f"{what}: gradient norms {['%.4f' % x for x in r['grad_norms']]}, losses "
              f"{['%.6f' % x for x in r['losses']]}; per tensor max |torch - drtrain| / max |drtrain|: "
              f"exp_avg {m['exp_avg']['rel']:.2e} ({m['exp_avg']['tensor']}), exp_avg_sq {m['exp_avg_sq']['rel']:.2e} "
              f"({m['exp_avg_sq']['tensor']}), params {m['params']['rel']:.2e} ({m['params']['tensor']}); "
              f"{r['amplified']['elements']} of {r['amplified']['of']} parameter elements beyond {TOLERANCE} of their "
              f"tensor's scale ({per_tensor}), within Adam's float32 rounding allowance: worst "
              f"{m['params_excess']['rel']:.2f} of it ({m['params_excess']['tensor']})")

    def equal(self, name, model):
        self.need_venv()
        clip = True
        d = self.train(name, model, clip)
        r = self.reference(d, clip)
        self.report(f"{name}{' (clip, decay-rule matrices)' if clip else ''}", r)
        if not r["equal"]:
            print(json.dumps(r["per_tensor"], indent=1))
            raise SystemExit(f"FAIL: drtrain's ckpt {STEPS} differs from PyTorch's by more than {TOLERANCE}")
        # Not equal by accident: the three steps moved every tensor far more than the tolerance.
        first, last = os.path.join(d, "ckpt-00000000.h5"), os.path.join(d, f"ckpt-{STEPS:08d}.h5")
        with h5py.File(first) as a, h5py.File(last) as b:
            for t in b["params"]:
                x, y = a["params"][t][()], b["params"][t][()]
                moved = np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-30)
                if not moved > 100 * TOLERANCE:
                    raise SystemExit(f"FAIL: {t} moved by only {moved:.2e} (relative) in {STEPS} steps")
        return d

    def dropout(self):
        self.equal("dropout", self.dropout_model())

    def tied(self):
        d = self.equal("tied", "gpt:2-2-32")
        # drtrain-ckpt export of the tied model loads into nanoGPT's model as it is: the head's
        # weight appears under lm_head.weight too (a hard link to transformer.wte.weight).
        exported = os.path.join(d, "state_dict.h5")
        run([os.path.join(self.a.bin, "drtrain-ckpt"), "export", os.path.join(d, f"ckpt-{STEPS:08d}.h5"), exported])
        code, out = run([self.python, "-c", STRICT_LOAD, os.path.dirname(REFERENCE), os.path.join(d, "ckpt-00000000.h5"),
                         exported], expect_ok=None, timeout=300)
        if code != 0 or "strict load: ok" not in out:
            print(out)
            raise SystemExit("FAIL: nanoGPT's load_state_dict(strict=True) refused drtrain-ckpt export's file")
        print(out.strip().splitlines()[-1])

    def control(self):
        self.need_venv()
        clip = True
        d = self.train("control", "gpt:2-2-32", clip)
        right = self.reference(d, clip)
        self.report("control, the right beta2", right)
        wrong = self.reference(d, clip, beta2=0.998)
        self.report("control, beta2 0.998", wrong)
        if not right["equal"]:
            raise SystemExit("FAIL: the control's own comparison with the right beta2 failed")
        m = wrong["max"]
        if wrong["equal"] or not (m["exp_avg_sq"]["rel"] > TOLERANCE and m["params_excess"]["rel"] > 1):
            raise SystemExit(f"FAIL: beta2 0.998 instead of 0.999 passed the comparison at {TOLERANCE} "
                             f"(exp_avg_sq {m['exp_avg_sq']['rel']:.2e}, parameters {m['params_excess']['rel']:.2f} of "
                             f"their limit): it cannot tell a wrong optimizer apart")
        print(f"control: beta2 0.998 fails as it must: exp_avg_sq differs by {m['exp_avg_sq']['rel']:.2e} "
              f"(limit {TOLERANCE}), the parameters by {m['params_excess']['rel']:.1f} times their limit")

    # ---- --checkpoint-start
    def start(self):
        work = os.path.join(self.a.work, "start")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        fresh, resumed = os.path.join(work, "fresh"), os.path.join(work, "resumed")
        model = self.dropout_model()  # dropout: its masks depend on the step, which must carry over
        _, out = self.drtrain(model, fresh, "--checkpoint-start", "true", "--keep", "10")
        expect(out, "a run from scratch saves its initial state first (--checkpoint-start)", "the setup line")
        first = os.path.join(fresh, "ckpt-00000000.h5")
        names = sorted(x for x in os.listdir(fresh) if x.startswith("ckpt-"))
        if names != ["ckpt-00000000.h5", f"ckpt-{STEPS:08d}.h5"]:
            raise SystemExit(f"FAIL: --checkpoint-start: {fresh} holds {names}")
        run([os.path.join(self.a.bin, "drtrain-ckpt"), "verify", first])
        with h5py.File(first) as f:
            attrs = {k: f.attrs[k] for k in ("step", "epoch", "step_in_epoch", "samples_seen")}
            if any(int(v) != 0 for v in attrs.values()):
                raise SystemExit(f"FAIL: ckpt 0's data cursor and step: {attrs}")
            for slot in f["optimizer"]:
                for t in f["optimizer"][slot]:
                    if np.any(f["optimizer"][slot][t][()] != 0):
                        raise SystemExit(f"FAIL: ckpt 0's {slot}/{t} is not zero")
            p = f["params"]
            if not (np.all(p["transformer.h.0.ln_1.weight"][()] == 1) and np.all(p["transformer.ln_f.bias"][()] == 0)
                    and np.all(p["transformer.h.1.attn.c_attn.bias"][()] == 0)):
                raise SystemExit("FAIL: ckpt 0's layer norms and biases are not at their initial 1 and 0")
            std = float(np.std(p["transformer.wte.weight"][()]))
            if not 0.015 < std < 0.025:
                raise SystemExit(f"FAIL: ckpt 0's transformer.wte.weight has std {std}, not about 0.02 (its init)")
        # Resumed from ckpt 0 (in another directory: a fork), 3 steps end bitwise where the fresh run ended.
        _, out = self.drtrain(model, resumed, "--resume", first, "--checkpoint-start", "true")
        expect(out, "after 0 updates", "resuming ckpt 0")
        names = sorted(x for x in os.listdir(resumed) if x.startswith("ckpt-"))
        if names != [f"ckpt-{STEPS:08d}.h5"]:
            raise SystemExit(f"FAIL: the run resumed from ckpt 0 wrote {names} (a resumed run saves no start)")
        last = f"ckpt-{STEPS:08d}.h5"
        run([os.path.join(self.a.bin, "drtrain-ckpt"), "diff", os.path.join(fresh, last), os.path.join(resumed, last),
             "--rtol", "0"])
        # Refused without a directory.
        cmd = self.a.mpiexec.split() + ["-n", "2", os.path.join(self.a.bin, "drtrain"), "--num-ps", "1",
                                        "--dataset", "synthetic", "--max-steps", "1", "--checkpoint-start", "true"]
        _, out = run(cmd, expect_ok=False, timeout=120)
        expect(out, "--checkpoint-start needs --checkpoint-dir DIR", "--checkpoint-start without a directory")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--data", required=True, help="pydoc.h5 (the gpt_train fixture's)")
    p.add_argument("--venv", required=True, help="the PyTorch venv (DRT_PEER_VENV overrides)")
    p.add_argument("--venv-timeout", type=int, default=3300)
    p.add_argument("case", choices=["venv", "start", "dropout", "tied", "control"])
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    case = Case(a)
    {"venv": case.venv_case, "start": case.start, "dropout": case.dropout, "tied": case.tied,
     "control": case.control}[a.case]()
    print(f"gpt_torch {a.case}: passed")


if __name__ == "__main__":
    main()
