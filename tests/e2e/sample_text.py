#!/usr/bin/python3
"""drtrain-ckpt sample end to end (run by ctest; see tests/CMakeLists.txt), on checkpoints written
here with h5py (docs/CHECKPOINT_FORMAT.md; the checksum by check_checkpoint.py's numpy code).

The models are GPTs whose weights are set by hand so that the greedy continuation is known: token
and position embeddings one-hot, one causal attention head that attends to the previous position
(a query of position i matches the key of position i - 1), and a head that makes the most likely
next token (the previous token + 1) mod V, i.e. x[n+1] = x[n-1] + 1 (x[n] + 1 for a lone first
token). The margin is one logit, so the rule also holds at temperature 1 among a top-k of 2:
the runner-up is x[n] + 1. `byte`: V = 256 (text), head tied to the embedding (the vocabulary
comes from the table); `ids`: V = 50, an untied head (token ids printed).

usage: sample_text.py --bin BUILD/bin --work DIR CASE
CASE:
  greedy   the known continuation, past the context, with --context, with an empty prompt, with
           --prompt-tokens and wrap-around, top-k 1 = greedy, top-k 2 keeps to the two best
  seeds    temperature 1: a seed gives the same text twice, another seed another
  errors   each refused input with its message and exit status 2: an image model's checkpoint,
           a file without a model definition (then --model), a prompt token >= vocabulary,
           --prompt on a non-byte vocabulary, negative --length/--temperature/--top-k, a context
           beyond the position table, a missing tensor, a damaged file, bad flags
"""
import argparse
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_checkpoint import checksum_of  # noqa: E402

CONTEXT = 16


def write_checkpoint(path, definition, params, model="test"):
    """A complete checkpoint of `params` (name -> float32 array) with `definition` (None: no
    model_definition attribute, as in files of drtrain before model files)."""
    with h5py.File(path, "w") as f:
        total = sum(v.size for v in params.values())
        for name, value in [("format_version", 1), ("step", 10), ("epoch", 0), ("step_in_epoch", 10),
                            ("samples_seen", 80), ("global_batch", 8), ("num_ps", 1), ("num_workers", 1),
                            ("towers", 1)]:
            f.attrs[name] = np.int64(value)
        strings = {"drtrain_version": "test", "model": model, "optimizer": "sgd", "optimizer_config": "sgd lr=0.1",
                   "config": f"model = {model}\n", "created": "2026-01-01T00:00:00Z",
                   "checksum_algorithm": "sum mod 2^64 of splitmix64 element hashes, v1"}
        if definition is not None:
            strings["model_definition"] = definition
        for name, value in strings.items():
            f.attrs[name] = np.bytes_(value.encode())
        f.attrs["seed"] = np.uint64(1)
        f.attrs["shard_boundaries"] = np.array([0, total], dtype=np.uint64)
        group = f.create_group("params")
        checksum = 0
        for name, value in params.items():
            group.create_dataset(name, data=np.asarray(value, dtype="<f4"))
            checksum = (checksum + checksum_of(f"/params/{name}", value)) & ((1 << 64) - 1)
        f.attrs["checksum"] = np.uint64(checksum)
        f.attrs["complete"] = np.int64(1)


def previous_plus_one(vocab, tied):
    """The hand-set GPT of the module's docstring: (definition, params). Width D: V token dims,
    CONTEXT position dims, and with a tied head V more dims that the shared table reads out."""
    V, C = vocab, CONTEXT
    P = V + C  # tied: the prediction dims
    D = 2 * V + C if tied else V + C
    wte = np.zeros((V, D), np.float32)
    for t in range(V):
        wte[t, t] = 1
        if tied:  # the head reads logit[v] = h[v] + h[P + v - 1]
            wte[t, P + (t - 1) % V] = 1
    wpe = np.zeros((C, D), np.float32)
    for p in range(C):
        wpe[p, V + p] = 1
    c_attn = np.zeros((3 * D, D), np.float32)  # [q; k; v] x input
    s = 30 * np.sqrt(D)  # scores s / sqrt(D) = 30 for the previous position, 0 for the others
    for p in range(1, C):
        c_attn[V + p - 1, V + p] = s  # q of position p: the key of position p - 1
    for p in range(C):
        c_attn[D + V + p, V + p] = 1  # k: the position
    for t in range(V):
        c_attn[2 * D + t, t] = 1  # v: the token
    c_proj = np.zeros((D, D), np.float32)
    for t in range(V):  # the previous token, weighted 3 (the current one counts 1 or 2)
        c_proj[P + t if tied else t, t] = 3
    params = {"wte.weight": wte, "wpe.weight": wpe, "attn.c_attn.weight": c_attn, "attn.c_proj.weight": c_proj}
    head = "head = linear(res) out=classes bias=false" + (" tie=wte" if tied else "")
    if not tied:
        w = np.zeros((V, D), np.float32)
        for t in range(V):
            w[(t + 1) % V, t] = 1
        params["head.weight"] = w
    definition = "\n".join([
        "model previous_plus_one",
        f"wte = embedding(input) vocab=classes dim={D}",
        f"wpe = pos_embedding(wte) context={C}",
        f"attn.c_attn = linear(wpe) out={3 * D} bias=false",
        "attn.attn = attention(attn.c_attn) heads=1",
        f"attn.c_proj = linear(attn.attn) out={D} bias=false",
        "res = add(attn.c_proj, wpe)",
        head, ""])
    return definition, params


def expected(prompt, length, vocab):
    seq = list(prompt)
    for _ in range(length):
        seq.append(((seq[-2] if len(seq) >= 2 else seq[-1]) + 1) % vocab)
    return seq[len(prompt):]


class Case:
    def __init__(self, a):
        self.a = a
        self.tool = os.path.join(a.bin, "drtrain-ckpt")
        self.byte = os.path.join(a.work, "byte.h5")
        self.ids = os.path.join(a.work, "ids.h5")

    def setup(self):
        shutil.rmtree(self.a.work, ignore_errors=True)
        os.makedirs(self.a.work)
        write_checkpoint(self.byte, *previous_plus_one(256, tied=True))
        write_checkpoint(self.ids, *previous_plus_one(50, tied=False))
        for path in (self.byte, self.ids):
            self.sample(["verify", path])

    def sample(self, args, ok=True):
        """Runs the tool; returns (exit status, stdout bytes, stderr text)."""
        cmd = [self.tool] + args if args[0] == "verify" else [self.tool, "sample"] + args
        # One BLAS thread: these models are tiny, and ctest runs tests side by side.
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, env=env)
        err = p.stderr.decode(errors="replace")
        if ok is not None and (p.returncode == 0) != ok:
            raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\nstdout: {p.stdout[:2000]!r}\n"
                             f"stderr: {err}")
        return p.returncode, p.stdout, err

    def same(self, got, want, what):
        if got != want:
            raise SystemExit(f"FAIL: {what}:\n  got  {got!r}\n  want {want!r}")

    def greedy(self):
        # Text: "AB" follows a 0 byte; 40 tokens, more than the 16 of the context.
        want = b"AB" + bytes(expected([0, 65, 66], 40, 256)) + b"\n"
        self.same(want[:11], b"ABBCCDDEEFF", "the rule itself")  # what `want` spells, as a check of expected()
        _, out, err = self.sample([self.byte, "--prompt", "AB", "--temperature", "0", "--length", "40"])
        self.same(out, want, "greedy text")
        if "sampled 40 tokens" not in err or "vocabulary 256, context 16" not in err:
            raise SystemExit(f"FAIL: the summary on stderr: {err}")
        # A shorter window (the rule needs two tokens): the same text.
        _, out, _ = self.sample([self.byte, "--prompt", "AB", "--temperature", "0", "--length", "40", "--context", "2"])
        self.same(out, want, "greedy text at --context 2")
        # No prompt, or an empty one: from the separator alone (not printed).
        want = bytes(expected([0], 20, 256)) + b"\n"
        self.same(want[:6], b"\x01\x01\x02\x02\x03\x03", "the rule from a lone token")
        for args in ([], ["--prompt", ""], ["--prompt-tokens", ""]):
            _, out, _ = self.sample([self.byte, "--temperature", "0", "--length", "20"] + args)
            self.same(out, want, f"greedy text from an empty prompt {args}")
        # Token ids as they are, past 255: a 0 byte prints as a newline.
        _, out, _ = self.sample([self.byte, "--prompt-tokens", "254,255", "--temperature", "0", "--length", "6"])
        self.same(out, b"\xfe\xff\xff\n\n\x01\x01\x02\n", "wrap-around and the separator")
        # Another vocabulary: ids separated by spaces; 100 tokens wrap around 50 twice.
        want = " ".join(str(t) for t in [3, 7] + expected([3, 7], 100, 50)) + "\n"
        _, out, _ = self.sample([self.ids, "--prompt-tokens", "3,7", "--temperature", "0", "--length", "100"])
        self.same(out.decode(), want, "greedy token ids")
        # Top-k 1 at temperature 1 is greedy, whatever the seed.
        for seed in ("1", "77"):
            _, out, _ = self.sample([self.ids, "--prompt-tokens", "3,7", "--top-k", "1", "--length", "100",
                                     "--seed", seed])
            self.same(out.decode(), want, f"top-k 1, seed {seed}")
        # Top-k 2: every token is one of the two best (x[n-1] + 1, x[n] + 1), and both occur.
        _, out, _ = self.sample([self.ids, "--prompt-tokens", "3,7", "--top-k", "2", "--length", "200"])
        seq = [int(t) for t in out.split()]
        picks = [seq[n + 1] == (seq[n - 1] + 1) % 50 for n in range(1, len(seq) - 1)]
        for n in range(1, len(seq) - 1):
            if seq[n + 1] not in ((seq[n - 1] + 1) % 50, (seq[n] + 1) % 50):
                raise SystemExit(f"FAIL: top-k 2 drew {seq[n + 1]} after {seq[n - 1]}, {seq[n]}")
        if len(seq) != 202 or all(picks) or not any(picks):
            raise SystemExit(f"FAIL: top-k 2: {len(seq)} ids, best taken {sum(picks)} of {len(picks)} times")
        print("ok: greedy continuations, windows, empty prompts, ids, top-k 1 and 2")

    def seeds(self):
        runs = {}
        for seed in ("1", "1", "2"):
            _, out, _ = self.sample([self.byte, "--prompt", "AB", "--length", "60", "--seed", seed])
            runs.setdefault(seed, []).append(out)
        self.same(runs["1"][0], runs["1"][1], "seed 1 twice")
        if runs["1"][0] == runs["2"][0]:
            raise SystemExit("FAIL: seeds 1 and 2 gave the same text")
        # Temperature 1 over 256 tokens where the best two lead by 3 and 2 logits: not greedy.
        greedy = self.sample([self.byte, "--prompt", "AB", "--length", "60", "--temperature", "0"])[1]
        if runs["1"][0] == greedy or len(set(runs["1"][0][2:])) < 20:
            raise SystemExit(f"FAIL: temperature 1 looks degenerate: {runs['1'][0]!r}")
        print("ok: a seed repeats, another differs")

    def errors(self):
        work = self.a.work
        fails = []

        def refused(args, needle):
            rc, out, err = self.sample(args, ok=None)
            if rc != 2 or needle not in err:
                fails.append(f"{args}: exit {rc}, stderr {err!r}; expected exit 2 and '{needle}'")

        # An image model: its data is read by a linear layer.
        mlp = os.path.join(work, "mlp.h5")
        write_checkpoint(mlp, "model tiny_mlp\nfc = linear(input) out=classes\n",
                         {"fc.weight": np.zeros((10, 784), np.float32), "fc.bias": np.zeros(10, np.float32)},
                         model="mlp:784-10")
        refused([mlp], "not a language model: its data is read by linear 'fc', not by an embedding of token ids")
        # No model definition: the message names --model and the file's model; --model then works.
        definition, params = previous_plus_one(50, tied=False)
        bare = os.path.join(work, "bare.h5")
        write_checkpoint(bare, None, params, model="prev.model")
        refused([bare], "bare.h5 stores no model definition (written by a drtrain before model files, or a "
                        "definition over 32 KiB): pass the model it was trained with, --model prev.model")
        model_file = os.path.join(work, "prev.model")
        with open(model_file, "w") as f:
            f.write(definition)
        _, out, _ = self.sample([bare, "--model", model_file, "--prompt-tokens", "3,7", "--temperature", "0",
                                 "--length", "4"])
        self.same(out, b"3 7 4 8 5 9\n", "--model for a file without a definition")
        refused([self.ids, "--prompt-tokens", "3,50"],
                "--prompt-tokens: token 50 is not below the model's vocabulary size 50: pass ids in 0..49")
        refused([self.ids, "--prompt-tokens", "3,-1"], "--prompt-tokens: '-1' is not a token id")
        refused([self.ids, "--prompt", "hello"], "--prompt TEXT is byte-level text, for models with a vocabulary of "
                                                 "256 (drtrain-data convert --text); this model's vocabulary is 50: "
                                                 "pass token ids with --prompt-tokens")
        refused([self.byte, "--length", "-1"], "--length -1 must be >= 0")
        refused([self.byte, "--length", "ten"], "--length 'ten' is not a whole number")
        refused([self.byte, "--temperature", "-0.5"], "--temperature -0.5 must be a finite number >= 0")
        refused([self.byte, "--temperature", "nan"], "--temperature nan must be a finite number >= 0")
        refused([self.byte, "--top-k", "-3"], "--top-k -3 must be >= 0")
        refused([self.byte, "--context", "17"], "--context 17 is larger than the position table: wpe.weight has 16 "
                                                "rows; pass --context 16 or less")
        refused([self.byte, "--context", "0"], "--context 0 must be at least 1")
        refused([self.byte, "--prompt", "a", "--prompt-tokens", "1"], "pass --prompt or --prompt-tokens, not both")
        refused([self.byte, "--length"], "--length needs a value")
        refused([self.byte, "--lenght", "3"], "sample has no option '--lenght'")
        refused([os.path.join(work, "missing.h5")], "missing.h5")
        # A tensor the definition needs is missing.
        del params["attn.c_proj.weight"]
        lacking = os.path.join(work, "lacking.h5")
        write_checkpoint(lacking, definition, params)
        refused([lacking], "holds no /params/attn.c_proj.weight, which its model needs ([66, 66])")
        # A damaged file: the checksum catches it before any text.
        damaged = os.path.join(work, "damaged.h5")
        shutil.copyfile(self.ids, damaged)
        with h5py.File(damaged, "r") as f:
            offset = f["params"]["head.weight"].id.get_offset()
        with open(damaged, "r+b") as f:
            f.seek(offset + 4 * 60)
            f.write(b"\x00\x00\x80\x3f")  # a 1.0 where the table holds a 0
        refused([damaged], "checksum does not match")
        if fails:
            raise SystemExit("FAIL:\n  " + "\n  ".join(fails))
        # --help lists the command.
        p = subprocess.run([self.tool, "--help"], capture_output=True, text=True)
        if p.returncode != 0 or "sample FILE [options]" not in p.stdout:
            raise SystemExit(f"FAIL: --help: {p.returncode} {p.stdout}")
        print("ok: every refused input names the problem, exit status 2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=["greedy", "seeds", "errors"])
    a = ap.parse_args()
    a.work = os.path.join(a.work, a.case)
    c = Case(a)
    c.setup()
    getattr(c, a.case)()


if __name__ == "__main__":
    main()
