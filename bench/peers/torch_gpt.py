#!/usr/bin/env python3
"""nanoGPT's GPT in PyTorch: drtrain's reference for its language models, and their benchmark peer.

The model is nanoGPT's (model.py), with its module names, so its state_dict names are those of
drtrain's gpt2 preset and checkpoints (docs/MODEL_FORMAT.md): transformer.wte, transformer.wpe,
transformer.h.{i}.ln_1, .attn.c_attn, .attn.c_proj, .ln_2, .mlp.c_fc, .mlp.c_proj,
transformer.ln_f, lm_head (tied to wte, or a weight of its own). Pre-norm blocks, tanh GELU,
causal attention: `exact` (an explicit masked softmax, in the model's dtype: float64 for the
reference) or `sdpa` (F.scaled_dot_product_attention, for speed). The loss is the mean over every
token of the batch, as drtrain's.

Dropout, three ways: `off`; `torch` (torch's own random masks: benchmarks); `drtrain`: exactly
drtrain's masks, a counter-based hash (include/drtrain/kernels/rules.hpp, dropout_key and
dropout_keep, ported to numpy below) of (seed, step, layer index, the sample's position in the
step's global batch, the element's index):
  - the dropout layers (transformer.drop, .attn.resid_dropout, .mlp.dropout): element
    t * D + d of a sample's [T, D] values (src/nn/layers/dropout.cpp, kernels/reference.cpp);
  - attention probabilities (.attn.attn, src/backend/cpu_attention.cpp): element
    (h * T + i) * T + j for head h, query i, key j; dropped after the softmax, whose normaliser
    counts every probability, kept ones scaled by 1 / (1 - p);
  - the layer index is the node's position in the model file's expanded graph (Network's
    prepare(), src/nn/network.cpp): read from the checkpoint's model_definition, or gpt2.model's
    order (wte 0, wpe 1, drop 2, then 12 nodes per block).

Library (tests/e2e/gpt_torch.py): GPTConfig, GPT, read_checkpoint, config_from_checkpoint,
load_params, make_adamw, load_adam_state, TokenWindows, read_plan, lr_at, train_reference,
compare_checkpoint. Command line:

  torch_gpt.py reference --init ckpt-00000000.h5 --data pydoc.h5 --steps 3 ... --compare ckpt-00000003.h5
      replays drtrain's steps in float64 from its checkpoint (same windows through
      `drtrain-data plan`, same masks, AdamW, schedule, optional clipping and decay rule) and
      compares every parameter and Adam moment with drtrain's later checkpoint (per tensor,
      max |difference| / max |drtrain|; parameters with an allowance for float32's rounding
      through Adam's division, ROUNDING below): one JSON line, exit 1 when they differ.
      --dtype float32 replays in float32 (what PyTorch's own float32 training gives), --save
      writes the final state in a checkpoint's layout (to compare two replays)
  torch_gpt.py train --data pydoc.h5 --context 256 --model gpt:6-6-384 --batch-size 32 ...
      training throughput: fp32 or bf16 autocast, eager or torch.compile, threads, DDP over gloo
      (--ranks N spawns N processes); one JSON line with tokens/s and peak RSS

Run it with a PyTorch venv: PY=$(bench/peers/make_venv.sh); $PY bench/peers/torch_gpt.py --help
"""

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np

# ---------------------------------------------------------------------------------------------
# drtrain's dropout masks (include/drtrain/kernels/rules.hpp), vectorised over uint64 arrays

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    """splitmix64's finaliser, as rules.hpp's mix64: on a Python int or a numpy uint64 array
    (uint64 array arithmetic wraps modulo 2^64, as C++'s does)."""
    if isinstance(z, (int, np.integer)):
        z = int(z) & M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)
    z = np.asarray(z, dtype=np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def dropout_key(seed, step, layer):
    """rules.hpp dropout_key(seed, step, layer): the key of one layer's masks at one step."""
    return mix64(mix64(seed ^ 0x6A09E667F3BCC908) ^ mix64((step * GOLDEN) & M64) ^
                 ((layer * 0xD1B54A32D192ED03) & M64))


def dropout_keep(key, samples, elements, p):
    """rules.hpp dropout_keep, broadcast: True where element `elements` of global sample `samples`
    is kept. samples [n] (positions in the step's global batch), elements [...]: returns
    [n, *elements.shape]. Kept when the hash's top 24 bits / 2^24 >= p (float32 p, as drtrain)."""
    s = np.asarray(samples, dtype=np.int64).astype(np.uint64).reshape((-1,) + (1,) * np.ndim(elements))
    e = np.asarray(elements, dtype=np.uint64)[None, ...]
    h = mix64(np.uint64(key) ^ mix64(s * np.uint64(GOLDEN) + e))
    # (h >> 40) < 2^24 and 2^-24 are exact in float32 and float64, so is the comparison.
    return (h >> np.uint64(40)).astype(np.float64) * 2.0 ** -24 >= float(np.float32(p))


def keep_scale(p):
    """1 / (1 - p) in float32, as drtrain's kernels compute it."""
    return float(np.float32(1.0) / (np.float32(1.0) - np.float32(p)))


def residual_mask(key, samples, positions, dim, p):
    """Mask [n, T, D] of a dropout layer over [n, T, D] values: element t * D + d."""
    return dropout_keep(key, samples, np.arange(positions * dim, dtype=np.uint64).reshape(positions, dim), p)


def attention_mask(key, samples, heads, length, p):
    """Mask [n, H, T, T] of the attention probabilities: element (h * T + i) * T + j."""
    e = np.arange(heads * length * length, dtype=np.uint64).reshape(heads, length, length)
    return dropout_keep(key, samples, e, p)


def gpt2_layer_indices(n_layer):
    """Node indices of gpt2.model (models/gpt2.model) for the nodes that draw masks."""
    out = {"transformer.drop": 2}
    for i in range(n_layer):
        base = 3 + 12 * i
        out[f"transformer.h.{i}.attn.attn"] = base + 2
        out[f"transformer.h.{i}.attn.resid_dropout"] = base + 4
        out[f"transformer.h.{i}.mlp.dropout"] = base + 10
    return out


NODE_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*([a-z_0-9]+)")


def parse_definition(text):
    """A checkpoint's model_definition (ModelGraph::to_text: the expanded graph, one node a line)
    -> [(name, kind, {option: value})] in order; the index in this list is the layer index that
    keys the node's dropout masks. The loss line, if any, is not a node."""
    nodes = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        m = NODE_LINE.match(line)
        if not m or line.strip().startswith(("model ", "let ")):
            continue
        name, kind = m.group(1), m.group(2)
        if kind == "softmax_cross_entropy":
            continue
        options = dict(re.findall(r"([a-z_]+)=([^\s]+)", line[m.end():]))
        nodes.append((name, kind, options))
    return nodes


# ---------------------------------------------------------------------------------------------
# The model

@dataclass
class GPTConfig:
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    block_size: int = 32        # rows of the position table (the longest context)
    vocab_size: int = 256
    dropout: float = 0.0        # transformer.drop, resid_dropout, mlp.dropout
    attn_dropout: float = 0.0   # the attention probabilities
    bias: bool = True
    tie: bool = True            # lm_head.weight is transformer.wte.weight
    layer_index: dict = field(default_factory=dict)  # dropout node -> drtrain layer index

    def indices(self):
        return self.layer_index or gpt2_layer_indices(self.n_layer)


def parse_model_spec(spec, context, vocab):
    """drtrain's --model gpt2 | gpt:L-H-D[-C] -> GPTConfig (C: position rows, default the context)."""
    if spec == "gpt2":
        return GPTConfig(12, 12, 768, 1024, vocab)
    m = re.fullmatch(r"gpt:(\d+)-(\d+)-(\d+)(?:-(\d+))?", spec)
    if not m:
        raise SystemExit(f"--model {spec}: expected gpt2 or gpt:L-H-D[-C]")
    L, H, D = int(m.group(1)), int(m.group(2)), int(m.group(3))
    C = int(m.group(4)) if m.group(4) else context
    if D % H:
        raise SystemExit(f"--model {spec}: {H} heads do not divide the width {D}")
    return GPTConfig(L, H, D, C, vocab)


def build_model(cfg):
    """A GPT module for cfg (torch imported here, so that the mask helpers need numpy only)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Dropper:
        """What the dropout sites do in this forward pass (set by GPT.forward)."""

        def __init__(self):
            self.mode, self.seed, self.step, self.samples = "off", 0, 0, None

        def __call__(self, x, name, p, attention=False):
            if self.mode == "off" or p == 0.0:
                return x
            if self.mode == "torch":
                return F.dropout(x, p, training=True)
            key = dropout_key(self.seed, self.step, cfg.indices()[name])
            if attention:
                n, heads, length, _ = x.shape
                keep = attention_mask(key, self.samples, heads, length, p)
            else:
                n, length, dim = x.shape
                keep = residual_mask(key, self.samples, length, dim, p)
            mask = torch.from_numpy(keep).to(device=x.device, dtype=x.dtype)
            return x * (mask * keep_scale(p))

    class CausalSelfAttention(nn.Module):
        def __init__(self, i):
            super().__init__()
            self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
            self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
            self.prefix = f"transformer.h.{i}.attn."

        def forward(self, x, drop, exact):
            B, T, C = x.shape
            H = cfg.n_head
            q, k, v = self.c_attn(x).split(C, dim=2)  # head h: columns h*C/H.. of each third
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            if exact:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
                causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
                att = drop(att, self.prefix + "attn", cfg.attn_dropout, attention=True)
                y = att @ v
            else:
                p = cfg.attn_dropout if drop.mode != "off" else 0.0
                if drop.mode == "drtrain" and p > 0:
                    raise ValueError("drtrain's attention masks need attention='exact'")
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return drop(self.c_proj(y), self.prefix + "resid_dropout", cfg.dropout)

    class MLP(nn.Module):
        def __init__(self, i):
            super().__init__()
            self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
            self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
            self.name = f"transformer.h.{i}.mlp.dropout"

        def forward(self, x, drop):
            return drop(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")), self.name, cfg.dropout)

    class Block(nn.Module):
        def __init__(self, i):
            super().__init__()
            self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5, bias=cfg.bias)
            self.attn = CausalSelfAttention(i)
            self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5, bias=cfg.bias)
            self.mlp = MLP(i)

        def forward(self, x, drop, exact):
            x = x + self.attn(self.ln_1(x), drop, exact)
            return x + self.mlp(self.ln_2(x), drop)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.config = cfg
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
                wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
                h=nn.ModuleList([Block(i) for i in range(cfg.n_layer)]),
                ln_f=nn.LayerNorm(cfg.n_embd, eps=1e-5, bias=cfg.bias)))
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
            if cfg.tie:
                self.lm_head.weight = self.transformer.wte.weight
            self.drop = Dropper()
            self.attention = "exact"
            # nanoGPT's initialisation (drtrain's gpt2.model has the same, from its own generator)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))
                elif p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)
                elif name.endswith(".bias"):
                    nn.init.zeros_(p)

        def set_dropout(self, mode, seed=0, step=0, samples=None):
            """mode off | torch | drtrain; drtrain: the step's seed, global step and the batch's
            sample positions in the global batch (0..B-1 for a whole global batch)."""
            self.drop.mode, self.drop.seed, self.drop.step = mode, seed, step
            self.drop.samples = samples

        def forward(self, idx, targets=None):
            B, T = idx.shape
            if T > cfg.block_size:
                raise ValueError(f"context {T} is longer than the position table ({cfg.block_size})")
            pos = torch.arange(T, device=idx.device)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            drop = self.drop if self.training else Dropper()
            if drop.mode == "drtrain" and drop.samples is None:
                drop.samples = np.arange(B)
            x = drop(x, "transformer.drop", cfg.dropout)
            for block in self.transformer.h:
                x = block(x, drop, self.attention == "exact")
            logits = self.lm_head(self.transformer.ln_f(x))
            if targets is None:
                return logits, None
            # Mean over every token of the batch (drtrain: of the global batch).
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
            return logits, loss

    return GPT()


# ---------------------------------------------------------------------------------------------
# drtrain's checkpoints and token files

def read_checkpoint(path):
    """{'params': {name: array}, 'slots': {slot: {name: array}}, 'attrs': {...}} of a drtrain
    checkpoint (docs/CHECKPOINT_FORMAT.md), strings decoded."""
    import h5py
    out = {"params": {}, "slots": {}, "attrs": {}}
    with h5py.File(path, "r") as f:
        for name in f["params"]:
            out["params"][name] = f["params"][name][()]
        if "optimizer" in f:
            for slot in f["optimizer"]:
                out["slots"][slot] = {n: f["optimizer"][slot][n][()] for n in f["optimizer"][slot]}
        for k, v in f.attrs.items():
            out["attrs"][k] = v.decode() if isinstance(v, bytes) else v
    return out


def config_from_checkpoint(ck):
    """The GPTConfig of a checkpoint of a nanoGPT-shaped model (gpt2.model, or a file like it):
    sizes from /params, heads and dropout from model_definition, the layer indices of the
    dropout nodes from its node order."""
    p = ck["params"]
    vocab, dim = p["transformer.wte.weight"].shape
    rows = p["transformer.wpe.weight"].shape[0]
    layers = sum(1 for n in p if re.fullmatch(r"transformer\.h\.\d+\.ln_1\.weight", n))
    nodes = parse_definition(ck["attrs"].get("model_definition", ""))
    if not nodes:
        raise SystemExit("the checkpoint has no model_definition (a drtrain before model files, or a model over "
                         "32 KiB): pass the configuration by hand")
    kinds = {name: (i, kind, opts) for i, (name, kind, opts) in enumerate(nodes)}
    cfg = GPTConfig(layers, 0, dim, rows, vocab, bias="transformer.h.0.attn.c_attn.bias" in p,
                    tie="lm_head.weight" not in p)
    drop_p, attn_p = set(), set()
    for name, (i, kind, opts) in kinds.items():
        if kind == "dropout":
            cfg.layer_index[name] = i
            drop_p.add(float(opts.get("p", 0.5)))
        elif kind == "attention":
            cfg.layer_index[name] = i
            cfg.n_head = int(opts["heads"])
            attn_p.add(float(opts.get("dropout", 0.0)))
    expected = set(gpt2_layer_indices(layers))
    if set(cfg.layer_index) != expected or len(drop_p) > 1 or len(attn_p) > 1 or not cfg.n_head:
        raise SystemExit(f"the checkpoint's model is not shaped like gpt2.model (dropout/attention nodes "
                         f"{sorted(cfg.layer_index)}, dropout p {sorted(drop_p)}, attention dropout {sorted(attn_p)})")
    cfg.dropout = drop_p.pop() if drop_p else 0.0
    cfg.attn_dropout = attn_p.pop() if attn_p else 0.0
    return cfg


def load_params(model, params):
    """Copies a checkpoint's /params into the model (any dtype); the tied head takes wte."""
    import torch
    state = {n: torch.from_numpy(np.asarray(a)) for n, a in params.items()}
    if model.config.tie:
        state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state, strict=True)


def decays(name, rule):
    """Whether --weight-decay applies to a tensor: `all` (drtrain before --decay-rule), or
    `matrices` (drtrain's --decay-rule default on branch wt/gpt-optim: the weights of linear
    layers, i.e. c_attn, c_proj, c_fc and an untied lm_head; not biases, layer norms or the
    embeddings, nor a head tied to wte, which is the embedding's table), or `nanogpt` (every
    tensor of rank >= 2, embeddings too: nanoGPT's configure_optimizers)."""
    if rule == "all":
        return True
    is_linear_weight = name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) or name == "lm_head.weight"
    if rule == "matrices":
        return is_linear_weight
    if rule == "nanogpt":
        return is_linear_weight or name in ("transformer.wte.weight", "transformer.wpe.weight")
    raise ValueError(f"unknown decay rule {rule}")


def make_adamw(model, lr, betas, eps, weight_decay, decay_rule="all", **kw):
    """torch.optim.AdamW with a decaying and a non-decaying group (names as the checkpoint's)."""
    import torch
    named = list(model.named_parameters())  # a tied weight once, under transformer.wte.weight
    groups = [{"params": [p for n, p in named if decays(n, decay_rule)], "weight_decay": weight_decay},
              {"params": [p for n, p in named if not decays(n, decay_rule)], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **kw)


def load_adam_state(opt, model, ck):
    """Puts a checkpoint's exp_avg / exp_avg_sq and update count into an AdamW's state."""
    import torch
    step = int(ck["attrs"]["step"])
    for name, p in model.named_parameters():
        state = opt.state[p]
        state["step"] = torch.tensor(float(step), dtype=torch.float32)
        for slot in ("exp_avg", "exp_avg_sq"):
            state[slot] = torch.from_numpy(np.asarray(ck["slots"][slot][name])).to(p.dtype).clone()


class TokenWindows:
    """Windows of a drtrain token file (docs/DATA_FORMAT.md): window i = tokens[i*T : i*T+T],
    targets tokens[i*T+1 : i*T+T+1]; count = floor((N - 1) / T). The stream is read whole when it
    is below `in_memory_bytes`, else each window from the file."""

    def __init__(self, path, context, split="train", in_memory_bytes=1 << 31):
        import h5py
        self.file = h5py.File(path, "r")
        self.vocab = int(self.file.attrs["vocab_size"])
        self.tokens = self.file[split]["tokens"]
        self.T = context
        n = self.tokens.shape[0]
        self.count = (n - 1) // context
        if self.count < 1:
            raise SystemExit(f"{path}:/{split}: {n} tokens, shorter than one window of {context} + 1")
        if n * self.tokens.dtype.itemsize <= in_memory_bytes:
            self.tokens = self.tokens[()]

    def batch(self, indices):
        """(inputs, targets) int64 [len(indices), T]."""
        T = self.T
        rows = np.stack([np.asarray(self.tokens[i * T: i * T + T + 1], dtype=np.int64) for i in indices])
        return rows[:, :T], rows[:, 1:]


def read_plan(drtrain_data, data_file, context, batch, seed, steps, epoch=0, ranks=1):
    """The global batches of `steps` steps from epoch `epoch`'s first (drtrain-data plan): a list
    of sample lists in part order, as drtrain --seed seed --batch-size batch takes them."""
    out = subprocess.run([drtrain_data, "plan", data_file, "--context", str(context), "--batch", str(batch),
                          "--seed", str(seed), "--epoch", str(epoch), "--steps", str(steps),
                          "--workers", str(ranks), "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{drtrain_data} plan failed ({out.returncode}): {out.stderr.strip()}")
    return [json.loads(line)["samples"] for line in out.stdout.splitlines()]


def lr_at(base, step, schedule="constant", warmup=0, total=0, min_lr=0.0, decay_steps=1000, decay_rate=0.1):
    """drtrain's LrSchedule::lr_at (src/optim/lr_schedule.cpp); step = global step from 0."""
    if step < warmup:
        return base * (step + 1) / warmup
    s = step - warmup
    if schedule == "constant":
        return base
    if schedule == "step":
        return base * decay_rate ** math.floor(s / decay_steps)
    if schedule == "cosine":  # nanoGPT's get_lr, operation for operation (as drtrain)
        if step > total:
            return min_lr
        coeff = 0.5 * (1.0 + math.cos(math.pi * s / (total - warmup)))
        return min_lr + coeff * (base - min_lr)
    raise ValueError(f"unknown schedule {schedule}")


# ---------------------------------------------------------------------------------------------
# The reference: drtrain's steps replayed in float64

def train_reference(a):
    """Loads a.init, runs a.steps steps as drtrain does; returns (model, optimizer, losses)."""
    import torch
    torch.set_num_threads(a.threads)
    ck = read_checkpoint(a.init)
    cfg = config_from_checkpoint(ck)
    model = build_model(cfg).to(getattr(torch, a.dtype))
    model.attention = "exact"
    load_params(model, ck["params"])
    first = int(ck["attrs"]["step"])  # a checkpoint of a run from scratch: updates == global step
    if int(ck["attrs"]["epoch"]) != 0 or int(ck["attrs"]["step_in_epoch"]) != first:
        raise SystemExit("the reference starts from a checkpoint within the first epoch")
    if int(ck["attrs"]["global_batch"]) != a.batch_size:
        raise SystemExit(f"the checkpoint's global batch is {ck['attrs']['global_batch']}, not {a.batch_size}")
    seed = int(ck["attrs"]["seed"])
    opt = make_adamw(model, a.lr, (a.beta1, a.beta2), a.eps, a.weight_decay, a.decay_rule, foreach=False)
    load_adam_state(opt, model, ck)
    data = TokenWindows(a.data, a.context)
    if data.vocab != cfg.vocab_size:
        raise SystemExit(f"{a.data}: vocab_size {data.vocab}, the checkpoint's model {cfg.vocab_size}")
    plan = read_plan(a.drtrain_data, a.data, a.context, a.batch_size, seed, first + a.steps)[first:]
    model.train()
    losses, norms, reach = [], [], {}
    for k, samples in enumerate(plan):
        step = first + k
        x, y = (torch.from_numpy(t) for t in data.batch(samples))
        model.set_dropout("drtrain", seed, step, np.arange(len(samples)))
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        # The global gradient norm before clipping (a tied weight once), as drtrain's PS computes it.
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip if a.grad_clip > 0
                                                          else float("inf"))))
        grads = {n: p.grad.double().numpy().copy() for n, p in model.named_parameters()}
        lr = lr_at(a.lr, step, a.lr_schedule, a.warmup_steps, a.total_steps or first + a.steps, a.min_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(float(loss.detach()))
        with torch.no_grad():  # float32's rounding through Adam's step (ROUNDING, compare_checkpoint)
            for name, p in model.named_parameters():
                v_hat = opt.state[p]["exp_avg_sq"].double().numpy() / (1.0 - a.beta2 ** (step + 1))
                largest = float(np.max(np.abs(grads[name])))
                reach[name] = reach.get(name, 0.0) + lr * largest / (np.sqrt(v_hat) + a.eps)
    opt.rounding_reach = reach  # for compare_checkpoint
    opt.grad_norms = norms
    return model, opt, losses


def relative_difference(mine, theirs):
    """max |mine - theirs| / max |theirs| over one tensor (0 when both are all zeros)."""
    scale = float(np.max(np.abs(theirs))) if theirs.size else 0.0
    diff = float(np.max(np.abs(mine - theirs))) if theirs.size else 0.0
    return diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)


# Where float32 and float64 must part. AdamW moves an element by lr * m_hat / (sqrt(v_hat) + eps)
# per step, so an absolute error d in its gradient moves it by lr * d / (sqrt(v_hat) + eps): Adam
# divides float32's rounding of the gradient sums (about 1e-7 of the tensor's largest gradient)
# by the element's own gradient scale. Where that scale is small the rounding becomes a visible
# part of a step: the key third of c_attn's bias, whose exact gradient is 0 (the softmax of
# q.(k_j + b) over j does not depend on b), is left at ~1e-21 by float64 and moved by 1e-4 of a
# step by float32; a weight whose first gradient is ~eps moves by 1e-3 of a step more or less.
# PyTorch's own float32 training parts from float64 there as much (reference --dtype float32). So
# an element of a parameter passes when
#     |torch - drtrain| <= tolerance x max |drtrain tensor| + ROUNDING x reach,
#     reach = sum over steps of lr_t x max_e' |g_t,e'| / (sqrt(v_hat_t,e) + eps)
# (the first-order effect of gradient errors of ROUNDING x the tensor's largest gradient, from
# the float64 replay). For an element with gradients near the tensor's largest the second term is
# about 1e-6 x lr, far below the first; it matters only where Adam amplifies. The moments have no
# division: they are compared with the tolerance alone.
ROUNDING = 1e-6


def compare_checkpoint(model, opt, path, tolerance):
    """Per tensor against a drtrain checkpoint (or a --save file): ({'params'|'exp_avg'|
    'exp_avg_sq': max |mine - theirs| / max |theirs|, 'params_excess': max over elements of
    |mine - theirs| / (tolerance x max |theirs| + ROUNDING x reach), 1 at the limit}, the
    checkpoint's step, {tensor: elements beyond the tolerance alone, within the rounding})."""
    ck = read_checkpoint(path)
    out = {"params": {}, "params_excess": {}, "exp_avg": {}, "exp_avg_sq": {}}
    amplified = {}
    reach = getattr(opt, "rounding_reach", {})
    for name, p in model.named_parameters():
        mine, theirs = p.detach().double().numpy(), ck["params"][name].astype(np.float64)
        out["params"][name] = relative_difference(mine, theirs)
        diff = np.abs(mine - theirs)
        plain = tolerance * float(np.max(np.abs(theirs)))
        limit = plain + ROUNDING * reach.get(name, 0.0)
        out["params_excess"][name] = float(np.max(diff / np.maximum(limit, 1e-300)))
        if np.any(diff > plain):
            amplified[name] = int(np.count_nonzero(diff > plain))
        for slot in ("exp_avg", "exp_avg_sq"):
            mine = opt.state[p][slot].double().numpy()
            out[slot][name] = relative_difference(mine, ck["slots"][slot][name].astype(np.float64))
    missing = set(ck["params"]) - {n for n, _ in model.named_parameters()}
    if missing:
        raise SystemExit(f"{path}: tensors the reference does not have: {sorted(missing)}")
    return out, int(ck["attrs"]["step"]), amplified


def save_state(model, opt, step, path):
    """The model's parameters and Adam moments in a drtrain checkpoint's layout (/params,
    /optimizer/exp_avg, /optimizer/exp_avg_sq, attribute step), float64: --compare reads it."""
    import h5py
    with h5py.File(path, "w") as f:
        f.attrs["step"] = step
        for name, p in model.named_parameters():
            f.create_dataset(f"params/{name}", data=p.detach().double().numpy())
            for slot in ("exp_avg", "exp_avg_sq"):
                f.create_dataset(f"optimizer/{slot}/{name}", data=opt.state[p][slot].double().numpy())


def reference_main(a):
    t0 = time.perf_counter()
    model, opt, losses = train_reference(a)
    if a.save:
        save_state(model, opt, int(read_checkpoint(a.init)["attrs"]["step"]) + a.steps, a.save)
    result = {"reference": "torch_gpt", "steps": a.steps, "losses": losses, "grad_norms": opt.grad_norms,
              "grad_clip": a.grad_clip, "tolerance": a.tolerance,
              "seconds": round(time.perf_counter() - t0, 3)}
    ok = True
    if a.compare:
        diffs, step, amplified = compare_checkpoint(model, opt, a.compare, a.tolerance)
        worst = {k: max(v.items(), key=lambda kv: kv[1]) for k, v in diffs.items() if v}
        limits = {"params": None, "params_excess": 1.0, "exp_avg": a.tolerance, "exp_avg_sq": a.tolerance}
        total = sum(p.numel() for p in model.parameters())
        result.update({"compared": a.compare, "compared_step": step, "per_tensor": diffs,
                       "max": {k: {"tensor": w[0], "rel": w[1], "limit": limits[k]} for k, w in worst.items()},
                       "rounding": ROUNDING,
                       "amplified": {"elements": sum(amplified.values()), "of": total, "per_tensor": amplified}})
        expected = int(read_checkpoint(a.init)["attrs"]["step"]) + a.steps
        ok = all(limits[k] is None or w[1] <= limits[k] for k, w in worst.items()) and step == expected
        result["equal"] = ok
    print(json.dumps(result), flush=True)
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------------
# Training throughput (benchmarks)

def peak_rss_mib():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def train_rank(rank, a, port):
    import torch
    torch.set_num_threads(a.threads)
    ddp = a.ranks > 1
    if ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks)
    device = torch.device(a.device)
    data = TokenWindows(a.data, a.context)
    cfg = parse_model_spec(a.model, a.context, data.vocab)
    cfg.dropout = cfg.attn_dropout = a.dropout
    torch.manual_seed(a.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's too)
    model = build_model(cfg).to(device)
    model.attention = a.attention
    params = sum(p.numel() for p in model.parameters())
    opt = make_adamw(model, a.lr, (a.beta1, a.beta2), a.eps, a.weight_decay, a.decay_rule)
    model.set_dropout("torch" if a.dropout > 0 else "off")
    if a.compile:
        model = torch.compile(model)
    net = DistributedDataParallel(model) if ddp else model
    total = a.warmup + a.steps
    local = a.batch_size // a.ranks
    if a.drtrain_data and os.path.exists(a.drtrain_data):  # drtrain's windows, in drtrain's order
        plan = read_plan(a.drtrain_data, a.data, a.context, a.batch_size, a.seed, total)
        order = "drtrain-data plan"
    else:  # a seeded permutation per epoch, the last partial batch dropped
        rng, plan, perm = np.random.default_rng(a.seed), [], np.array([], dtype=np.int64)
        while len(plan) < total:
            if len(perm) < a.batch_size:
                perm = rng.permutation(data.count)
            plan.append(perm[:a.batch_size].tolist())
            perm = perm[a.batch_size:]
        order = "numpy permutation"
    amp = a.precision == "bf16"

    def step(i):
        x, y = (torch.from_numpy(t).to(device) for t in data.batch(plan[i][rank * local:(rank + 1) * local]))
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            _, loss = net(x, y)  # mean over the local tokens; DDP averages over ranks
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(a.lr, i, a.lr_schedule, a.warmup_steps, total, a.min_lr)
        opt.step()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    net.train()
    for i in range(a.warmup):
        step(i)
    if ddp:
        dist.barrier()
    sync()
    t0 = time.perf_counter()
    loss = None
    for i in range(a.warmup, total):
        loss = step(i)
    if ddp:
        dist.barrier()
    sync()
    wall = time.perf_counter() - t0
    rss = torch.tensor([peak_rss_mib(), peak_rss_mib()], dtype=torch.float64)
    if ddp:
        mx, sm = rss[0:1].clone(), rss[1:2].clone()
        dist.all_reduce(mx, op=dist.ReduceOp.MAX)
        dist.all_reduce(sm, op=dist.ReduceOp.SUM)
        rss = torch.cat([mx, sm])
    if rank == 0:
        tokens = a.steps * a.batch_size * a.context
        print(json.dumps({
            "peer": "torch_gpt", "model": a.model, "parameters": params, "context": a.context,
            "batch_size": a.batch_size, "ranks": a.ranks, "threads": a.threads, "device": a.device,
            "precision": a.precision, "compile": a.compile, "attention": a.attention, "dropout": a.dropout,
            "tokens_per_s": tokens / wall, "step_ms": 1e3 * wall / a.steps, "steps": a.steps, "warmup": a.warmup,
            "wall_s": wall, "last_loss": float(loss.detach()), "peak_rss_mib": float(rss[0]),
            "peak_rss_mib_all_ranks": float(rss[1]), "window_order": order, "torch": torch.__version__,
            **({"gpu": torch.cuda.get_device_name(0)} if device.type == "cuda" else {}),
        }), flush=True)
    if ddp:
        dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_main(a):
    if a.batch_size % a.ranks:
        raise SystemExit(f"--batch-size {a.batch_size} must be a multiple of --ranks {a.ranks}")
    if a.device == "cuda" and a.ranks != 1:
        raise SystemExit("--device cuda runs one process: --ranks 1")
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before torch loads
        os.environ[name] = str(a.threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if a.ranks == 1:
        train_rank(0, a, None)
        return 0
    import torch.multiprocessing as mp
    mp.spawn(train_rank, args=(a, free_port()), nprocs=a.ranks, join=True)
    return 0


# ---------------------------------------------------------------------------------------------

def add_optimizer_args(p):
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--lr-schedule", choices=["constant", "step", "cosine"], default="constant")
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--decay-rule", choices=["all", "matrices", "nanogpt"], default="all",
                   help="which tensors decay: all (drtrain before --decay-rule), matrices (drtrain's --decay-rule "
                        "matrices), nanogpt (rank >= 2, embeddings too)")
    p.add_argument("--grad-clip", type=float, default=0.0, help="clip_grad_norm_ to this global norm (0: off)")


def parse_args(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    default_tool = os.path.join(here, "..", "..", "build", "bin", "drtrain-data")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("reference", help="replay drtrain's steps in float64 from a checkpoint and compare",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("--init", required=True, help="the drtrain checkpoint to start from (e.g. ckpt-00000000.h5)")
    r.add_argument("--data", required=True, help="the token file drtrain trained on")
    r.add_argument("--context", type=int, required=True)
    r.add_argument("--batch-size", type=int, required=True, help="drtrain's global batch")
    r.add_argument("--steps", type=int, required=True)
    r.add_argument("--total-steps", type=int, default=0,
                   help="the run's total steps (cosine's length; 0: the checkpoint's step + --steps)")
    add_optimizer_args(r)
    r.add_argument("--compare", default="", help="drtrain's checkpoint after those steps (or a --save file)")
    r.add_argument("--save", default="", help="also write the final state here, in a checkpoint's layout")
    r.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                   help="float32: what PyTorch's own float32 training gives (the float32 rounding floor)")
    r.add_argument("--tolerance", type=float, default=1e-5, help="largest relative difference per tensor")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--drtrain-data", default=default_tool, help="for `drtrain-data plan` (the windows per step)")
    t = sub.add_parser("train", help="training throughput (benchmarks)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--data", required=True, help="a drtrain token file")
    t.add_argument("--context", type=int, default=256)
    t.add_argument("--model", default="gpt:6-6-384", help="gpt2 or gpt:L-H-D[-C], as drtrain's --model")
    t.add_argument("--batch-size", type=int, default=32, help="global batch (windows)")
    t.add_argument("--steps", type=int, default=20, help="timed steps")
    t.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens there)")
    add_optimizer_args(t)
    t.add_argument("--dropout", type=float, default=0.0, help="torch's dropout (residual and attention)")
    t.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: autocast")
    t.add_argument("--compile", action="store_true", help="torch.compile the model")
    t.add_argument("--attention", choices=["sdpa", "exact"], default="sdpa")
    t.add_argument("--threads", type=int, default=1, help="torch threads per process")
    t.add_argument("--ranks", type=int, default=1, help="N > 1: DDP over gloo, N spawned processes")
    t.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--drtrain-data", default=default_tool,
                   help="drtrain-data, for drtrain's window order (numpy's permutation if it is missing)")
    a = p.parse_args(argv)
    if a.mode == "train" and (a.steps < 1 or a.warmup < 0 or a.ranks < 1 or a.threads < 1):
        p.error("--steps, --ranks and --threads must be >= 1, --warmup >= 0")
    return a


def main():
    a = parse_args()
    return reference_main(a) if a.mode == "reference" else train_main(a)


if __name__ == "__main__":
    sys.exit(main())
