#!/usr/bin/python3
"""drtrain-data end to end, on files written by h5py and numpy (run by ctest; tests/CMakeLists.txt).

usage: data_files.py --bin BUILD/bin --work DIR CASE
CASE:
  fixture  writes DIR/good_h5py.h5 (what a user writes with h5py: contiguous float32 NHWC images,
           int64 labels, variable-length string attributes, mean/std), the .npy arrays of the
           tool case, and broken files for the bad_input.data_* tests (each with what is wrong
           in its name): wrong_rank, float64, no_layout, bad_layout, count_mismatch,
           label_range, no_version, no_classes, truncated, corrupt_chunk, not_hdf5; token files:
           good_tokens.h5 (h5py, uint16, contiguous) and tok_no_vocab, tok_signed, tok_rank2,
           tok_range, tok_vocab_big, tok_float; text files, llm.c shards (as llm.c's
           write_datafile writes them) and nanoGPT's uint16 train.bin/val.bin of the same tokens
  tokens   drtrain-data on token streams: convert --text (a directory, a quoted pattern, a test
           split from files or --test-fraction) gives the bytes with a 0 before each file, in
           sorted order, as numpy computes them; --llmc-bin and --uint16-bin of the same tokens
           give the same file contents; info, verify, bench --context; every subcommand's --help
           names the token inputs; bad shards and usage exit 1 and 2 with their messages, and a
           failed convert leaves neither OUT nor OUT.tmp
  pydoc    scripts/make_text_corpus.sh on Python's documentation (Debian package python3.11-doc;
           skipped, 77, without it) twice: the same tokens both times, exactly the files' bytes
           in sorted order with the held-out 5% of each file in /test
  plan     drtrain-data plan: every epoch's steps take every sample once (the last batch the
           remainder), the same for the same seed and another for another seed or epoch; --steps
           runs on into the next epoch as --epoch does; --workers/--towers cut each batch into
           parts; a token file's count is its windows at --context; bad usage exits 2
  tool     drtrain-data on them: verify accepts the h5py file and reads back what h5py wrote;
           convert --npy of numpy arrays (both layouts, uint8 and float32, a test split,
           --normalize) reads back with h5py as the arrays were; info lists the splits, chunks,
           filters and samples per class; synth is deterministic in its seed and honours
           --dtype, --layout and --chunk-kib; a failed convert
           leaves neither OUT nor OUT.tmp; bad usage exits 2, a bad file 1
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys

import h5py
import numpy as np


def run(cmd, expect_rc=0):
    try:  # 120 s: a hang guard (each command takes seconds)
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired as e:
        print(e.output.decode(errors="replace") if isinstance(e.output, bytes) else e.output)
        raise SystemExit(f"FAIL: {' '.join(cmd)} did not end within 120 s (a hang guard; its output is above)")
    if expect_rc is not None and p.returncode != expect_rc:
        print(p.stdout)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}, expected {expect_rc}")
    return p.stdout


def expect(text, needle, what):
    if needle not in text:
        print(text)
        raise SystemExit(f"FAIL: {what}: the output lacks {needle!r}")


def dataset_file(path, images, labels, layout="NCHW", classes=10, version=1, chunks=None, fletcher32=False):
    with h5py.File(path, "w") as f:
        if version is not None:
            f.attrs["drtrain_dataset"] = version
        if classes is not None:
            f.attrs["classes"] = classes
        g = f.create_group("train")
        d = g.create_dataset("images", data=images, chunks=chunks, fletcher32=fletcher32)
        if layout is not None:
            d.attrs["layout"] = layout
        g.create_dataset("labels", data=labels, chunks=chunks and (chunks[0],), fletcher32=fletcher32)


def fixture(work):
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(7)
    # What a user writes with h5py: float32 NHWC, int64 labels, str attributes (variable length).
    x = rng.random((50, 6, 5, 3), dtype=np.float32)
    y = rng.integers(0, 4, 50)
    tx = rng.random((20, 6, 5, 3), dtype=np.float32)
    ty = rng.integers(0, 4, 20)
    with h5py.File(os.path.join(work, "good_h5py.h5"), "w") as f:
        f.attrs["drtrain_dataset"] = 1
        f.attrs["classes"] = 4
        f.attrs["class_names"] = "cat,dog,ship,frog"
        for name, (images, labels) in {"train": (x, y), "test": (tx, ty)}.items():
            g = f.create_group(name)
            g.create_dataset("images", data=images).attrs["layout"] = "NHWC"
            g.create_dataset("labels", data=labels)
            g.create_dataset("mean", data=x.mean(axis=(0, 1, 2)))
            g.create_dataset("std", data=x.std(axis=(0, 1, 2)))
    np.save(os.path.join(work, "h5py_x.npy"), x)
    np.save(os.path.join(work, "h5py_y.npy"), y)

    # .npy arrays for convert: uint8 [N, H, W] with uint8 labels, float32 NCHW with int32 labels
    np.save(os.path.join(work, "u8_x.npy"), rng.integers(0, 256, (300, 7, 9), dtype=np.uint8))
    np.save(os.path.join(work, "u8_y.npy"), rng.integers(0, 10, 300).astype(np.uint8))
    np.save(os.path.join(work, "u8_tx.npy"), rng.integers(0, 256, (40, 7, 9), dtype=np.uint8))
    np.save(os.path.join(work, "u8_ty.npy"), rng.integers(0, 10, 40).astype(np.uint8))
    np.save(os.path.join(work, "f4_x.npy"), rng.standard_normal((64, 3, 4, 4)).astype(np.float32))
    np.save(os.path.join(work, "f4_y.npy"), rng.integers(0, 3, 64).astype(np.int32))
    np.save(os.path.join(work, "f8_x.npy"), rng.standard_normal((64, 3, 4, 4)))

    images = rng.integers(0, 256, (10, 1, 4, 4), dtype=np.uint8)
    labels = np.arange(10) % 10
    bad = lambda name: os.path.join(work, name + ".h5")  # noqa: E731
    dataset_file(bad("wrong_rank"), images[:, 0], labels)
    dataset_file(bad("float64"), images.astype(np.float64), labels)
    dataset_file(bad("no_layout"), images, labels, layout=None)
    dataset_file(bad("bad_layout"), images, labels, layout="HWC")
    dataset_file(bad("count_mismatch"), images, labels[:9])
    dataset_file(bad("label_range"), images, np.array([0, 1, 2, 3, 4, 5, 6, 12, 8, 9]))
    dataset_file(bad("no_version"), images, labels, version=None)
    dataset_file(bad("no_classes"), images, labels, classes=None)
    big = rng.integers(0, 256, (400, 1, 16, 16), dtype=np.uint8)
    big_labels = np.arange(400) % 10
    dataset_file(bad("chunked"), big, big_labels, chunks=(40, 1, 16, 16), fletcher32=True)
    raw = open(bad("chunked"), "rb").read()
    open(bad("truncated"), "wb").write(raw[: len(raw) // 2])
    # Flip bytes inside chunk 5 of the images (samples 200..239).
    dataset_file(bad("corrupt_chunk"), big, big_labels, chunks=(40, 1, 16, 16), fletcher32=True)
    with h5py.File(bad("corrupt_chunk"), "r") as f:
        info = f["train/images"].id.get_chunk_info(5)
        assert info.chunk_offset[0] == 200, info
        offset = info.byte_offset
    with open(bad("corrupt_chunk"), "r+b") as f:
        f.seek(offset + 64)
        chunk = bytearray(f.read(32))
        f.seek(offset + 64)
        f.write(bytes(b ^ 0xA5 for b in chunk))
    with open(bad("not_hdf5"), "w") as f:
        f.write("pixel,label\n0,1\n")
    token_fixture(work, rng)
    print(f"fixture: files in {work}")


def token_file(path, tokens, vocab=1000, split="train", chunks=None):
    with h5py.File(path, "w") as f:
        f.attrs["drtrain_dataset"] = 1
        if vocab is not None:
            f.attrs["vocab_size"] = vocab
        f.create_group(split).create_dataset("tokens", data=tokens, chunks=chunks)


def llmc_shard(path, tokens, magic=20240520, version=1, count=None):
    """As llm.c's dev/data/data_common.py write_datafile writes a GPT-2 shard."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1] = magic, version
    header[2] = len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def token_fixture(work, rng):
    bad = lambda name: os.path.join(work, name + ".h5")  # noqa: E731
    stream = rng.integers(0, 1000, 500).astype(np.uint16)
    with h5py.File(os.path.join(work, "good_tokens.h5"), "w") as f:
        f.attrs["drtrain_dataset"] = 1
        f.attrs["vocab_size"] = 1000
        f.create_group("train").create_dataset("tokens", data=stream)
        f.create_group("test").create_dataset("tokens", data=stream[:50])
    token_file(bad("tok_no_vocab"), stream, vocab=None)
    token_file(bad("tok_signed"), stream.astype(np.int64))  # what np.array(list_of_ints) gives
    token_file(bad("tok_rank2"), stream.reshape(50, 10))
    out_of_range = stream.copy()
    out_of_range[7] = 1000
    token_file(bad("tok_range"), out_of_range, chunks=(64,))
    token_file(bad("tok_vocab_big"), stream, vocab=2**24 + 1)
    token_file(bad("tok_float"), stream.astype(np.float32))

    # text: a directory (nested, with a hidden file and an empty one) and a file of its own
    text = os.path.join(work, "text")
    os.makedirs(os.path.join(text, "sub"), exist_ok=True)
    for name, body in (("b.txt", "Beta line\n" * 7), ("a.txt", "alpha \u2713 text\n" * 5), ("sub/c.rst", "gamma" * 9),
                       (".hidden", "not this"), ("empty.txt", "")):
        with open(os.path.join(text, name), "wb") as f:
            f.write(body.encode())
    with open(os.path.join(work, "other.txt"), "wb") as f:
        f.write(b"held out text\n")

    # llm.c shards and nanoGPT's uint16 files of the same tokens
    a = rng.integers(0, 50257, 3000)
    b = rng.integers(0, 50257, 700)
    v = rng.integers(0, 50257, 300)
    llmc_shard(os.path.join(work, "shard_train_000001.bin"), b)  # the pattern's matches are sorted
    llmc_shard(os.path.join(work, "shard_train_000000.bin"), a)
    llmc_shard(os.path.join(work, "shard_val_000000.bin"), v)
    np.concatenate([a, b]).astype(np.uint16).tofile(os.path.join(work, "train.bin"))
    v.astype(np.uint16).tofile(os.path.join(work, "val.bin"))
    llmc_shard(os.path.join(work, "bad_magic.bin"), a, magic=12345)
    llmc_shard(os.path.join(work, "cut_short.bin"), a, count=3001)
    llmc_shard(os.path.join(work, "big_token.bin"), [1, 2, 50257, 4])


def tool(work, bin_dir):
    data = os.path.join(bin_dir, "drtrain-data")
    path = lambda name: os.path.join(work, name)  # noqa: E731

    # verify and read back what h5py wrote
    out = run([data, "verify", path("good_h5py.h5")])
    expect(out, "OK: " + path("good_h5py.h5"), "verify of the h5py file")
    expect(out, ":/test: 20 samples of 3x6x5 float32 and their labels read back", "verify of the test split")
    out = run([data, "info", path("good_h5py.h5")])
    expect(out, "4 classes", "info")
    expect(out, "class names: cat,dog,ship,frog", "info")
    expect(out, "/train: 50 samples of 3x6x5 (CxHxW) float32, layout NHWC", "info")
    expect(out, "images  float32 [50, 6, 5, 3], contiguous, no filters", "info")
    expect(out, "labels  int64 [50], contiguous", "info")

    # convert --npy: uint8 [N, H, W] with a test split and --normalize; compare with numpy
    out_h5 = path("u8.h5")
    run([data, "convert", "--npy", path("u8_x.npy"), path("u8_y.npy"), "--test-npy", path("u8_tx.npy"),
         path("u8_ty.npy"), "--normalize", "--compress", "1", out_h5])
    with h5py.File(out_h5, "r") as f:
        x = np.load(path("u8_x.npy"))
        if f.attrs["drtrain_dataset"] != 1 or f.attrs["classes"] != np.load(path("u8_y.npy")).max() + 1:
            raise SystemExit(f"FAIL: root attributes {dict(f.attrs)}")
        images = f["train/images"]
        if images.shape != (300, 1, 7, 9) or images.attrs["layout"] not in (b"NCHW", "NCHW"):
            raise SystemExit(f"FAIL: /train/images {images.shape} {dict(images.attrs)}")
        if not np.array_equal(images[:, 0], x) or not np.array_equal(f["test/labels"][()], np.load(path("u8_ty.npy"))):
            raise SystemExit("FAIL: the converted uint8 arrays differ from the .npy files")
        if not images.fletcher32 or images.compression != "gzip" or images.chunks[1:] != (1, 7, 9):
            raise SystemExit(f"FAIL: storage {images.chunks} {images.compression} {images.fletcher32}")
        mean, std = (x / np.float32(255)).mean(), (x / np.float32(255)).std()
        for split in ("train", "test"):
            got = f[split + "/mean"][0], f[split + "/std"][0]
            if abs(got[0] - mean) > 1e-5 or abs(got[1] - std) > 1e-5:
                raise SystemExit(f"FAIL: /{split} mean/std {got}, numpy says {mean}, {std}")
    expect(run([data, "verify", out_h5]), "OK: ", "verify of the converted file")
    out = run([data, "info", out_h5])
    expect(out, "filters gzip(1) fletcher32", "info of the converted file")
    expect(out, "(computed from train)", "info of the converted file")

    # float32 NCHW; --layout is needed for 4-D arrays
    out = run([data, "convert", "--npy", path("f4_x.npy"), path("f4_y.npy"), path("f4.h5")], expect_rc=1)
    expect(out, "f4_x.npy: a 4-D image array [64, 3, 4, 4]: say how its axes are ordered with --layout", "convert")
    run([data, "convert", "--npy", path("f4_x.npy"), path("f4_y.npy"), "--layout", "NCHW", "--classes", "5",
         path("f4.h5")])
    with h5py.File(path("f4.h5"), "r") as f:
        if not np.array_equal(f["train/images"][()], np.load(path("f4_x.npy"))) or f.attrs["classes"] != 5:
            raise SystemExit("FAIL: the converted float32 array differs from the .npy file")
    # the h5py file's arrays as NHWC .npy, converted: same pixels as the h5py file
    run([data, "convert", "--npy", path("h5py_x.npy"), path("h5py_y.npy"), "--layout", "NHWC", path("nhwc.h5")])
    with h5py.File(path("nhwc.h5"), "r") as f, h5py.File(path("good_h5py.h5"), "r") as g:
        if not np.array_equal(f["train/images"][()], g["train/images"][()]):
            raise SystemExit("FAIL: NHWC conversion changed the pixels")

    # a failed convert leaves nothing under OUT
    failed = path("failed.h5")
    out = run([data, "convert", "--npy", path("f8_x.npy"), path("f4_y.npy"), "--layout", "NCHW", failed], expect_rc=1)
    expect(out, "f8_x.npy: images of dtype float64", "convert of float64")
    out = run([data, "convert", "--npy", path("u8_x.npy"), path("u8_y.npy"), "--classes", "3", failed], expect_rc=1)
    expect(out, "is not below the number of classes (--classes 3)", "convert with too few classes")
    if os.path.exists(failed) or os.path.exists(failed + ".tmp"):
        raise SystemExit("FAIL: a failed convert left " + failed + " or its .tmp")

    # synth: the same seed gives the same bytes
    for name, seed in (("s1.h5", "5"), ("s2.h5", "5"), ("s3.h5", "6")):
        run([data, "synth", path(name), "--count", "500", "--test-count", "30", "--shape", "3,8,8", "--classes", "4",
             "--seed", seed])
    with h5py.File(path("s1.h5"), "r") as a, h5py.File(path("s2.h5"), "r") as b, h5py.File(path("s3.h5"), "r") as c:
        for d in ("train/images", "train/labels", "test/images", "test/labels"):
            if not np.array_equal(a[d][()], b[d][()]):
                raise SystemExit(f"FAIL: synth with one seed differs in {d}")
        if np.array_equal(a["train/images"][()], c["train/images"][()]):
            raise SystemExit("FAIL: synth with another seed wrote the same images")
    expect(run([data, "verify", path("s1.h5")]), "OK: ", "verify of a synthetic file")
    run([data, "synth", path("s4.h5"), "--count", "100", "--shape", "2,8,8", "--dtype", "float32", "--layout", "NHWC",
         "--chunk-kib", "2", "--normalize"])
    with h5py.File(path("s4.h5"), "r") as f:
        images = f["train/images"]
        if images.chunks != (4, 8, 8, 2) or images.dtype != np.float32 or f["train/mean"].shape != (2,):
            raise SystemExit(f"FAIL: synth --chunk-kib 2: chunks {images.chunks}, {images.dtype}")
    out = run([data, "bench", path("s1.h5"), "--batch", "16", "--seconds", "1"])
    expect(out, "random batches of 16", "bench")

    # exit status: 2 for bad usage (with the usage text), 1 for a bad file
    for args in ([], ["frobnicate"], ["convert", "--idx"], ["convert", "--idx", "d", "--npy", "a", "b", "o.h5"],
                 ["synth", path("x.h5"), "--count", "10"], ["synth", path("x.h5"), "--count", "ten", "--shape", "1,2,2"],
                 ["synth", path("x.h5"), "--count", "10", "--shape", "1,0,2"], ["info"], ["verify", "a", "b"],
                 ["convert", "--npy", "a", "b", "--layout", "CHW", "o.h5"], ["bench", "f", "--batchsize", "3"]):
        out = run([data] + args, expect_rc=2)
        expect(out, "usage: drtrain-data convert", f"drtrain-data {' '.join(args)}")
    expect(run([data, "info", path("not_hdf5.h5")], expect_rc=1), "not an HDF5 file", "info of a bad file")
    print("tool: ok")


def text_files(root):
    """The files drtrain-data convert --text takes from a directory: below it, no names starting
    with '.', sorted by their paths' bytes."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        out += [os.path.join(d, x) for x in files if not x.startswith(".")]
    return sorted(out, key=os.fsencode)


def text_streams(files, fraction=0.0, test_files=()):
    """The /train and /test streams of a byte-level conversion: a 0 before each nonempty part."""
    train, test = [], []
    for path, is_test in [(p, False) for p in files] + [(p, True) for p in test_files]:
        data = list(open(path, "rb").read())
        keep = 0 if is_test else (math.floor(len(data) * (1.0 - fraction)) if fraction else len(data))
        if keep:
            train += [0] + data[:keep]
        if len(data) > keep:
            test += [0] + data[keep:]
    return np.array(train), np.array(test)


def expect_tokens(path, split, expected, dtype, vocab):
    with h5py.File(path, "r") as f:
        if f.attrs["vocab_size"] != vocab or f.attrs["drtrain_dataset"] != 1 or "classes" in f.attrs:
            raise SystemExit(f"FAIL: {path}: root attributes {dict(f.attrs)}")
        d = f[split + "/tokens"]
        if d.dtype != dtype or not d.fletcher32 or d.chunks is None:
            raise SystemExit(f"FAIL: {path}:/{split}/tokens stored as {d.dtype}, chunks {d.chunks}")
        if not np.array_equal(d[()], expected):
            raise SystemExit(f"FAIL: {path}:/{split}/tokens differ from what was expected ({len(d)} vs {len(expected)})")


def tokens(work, bin_dir):
    data = os.path.join(bin_dir, "drtrain-data")
    path = lambda name: os.path.join(work, name)  # noqa: E731

    # the h5py file: verify, info, bench
    out = run([data, "verify", path("good_tokens.h5")])
    expect(out, ":/train: 500 tokens read back, each below vocab_size 1000", "verify of the h5py token file")
    expect(out, "OK: " + path("good_tokens.h5"), "verify of the h5py token file")
    out = run([data, "info", path("good_tokens.h5")])
    expect(out, "drtrain token data set, format version 1, vocab_size 1000", "info")
    expect(out, "/test: 50 tokens", "info")
    expect(out, "tokens  uint16 [500], contiguous, no filters", "info")
    expect(run([data, "bench", path("good_tokens.h5"), "--context", "16", "--batch", "8", "--seconds", "1"]),
           "500 tokens (uint16), windows of 16", "bench of a token file")

    # text: a directory with a held-out fraction; a pattern with a test file
    files = text_files(path("text"))
    if [os.path.relpath(f, path("text")) for f in files] != ["a.txt", "b.txt", "empty.txt", "sub/c.rst"]:
        raise SystemExit(f"FAIL: the fixture's text files {files}")
    out = run([data, "convert", "--text", path("text"), "--test-fraction", "0.25", path("text.h5")])
    train, test = text_streams(files, 0.25)
    expect(out, f"wrote {path('text.h5')}:/train: {len(train)} tokens (uint8), vocab_size 256", "convert --text")
    expect_tokens(path("text.h5"), "train", train, np.uint8, 256)
    expect_tokens(path("text.h5"), "test", test, np.uint8, 256)
    run([data, "convert", "--text", path("text") + "/*.txt", path("text/sub"), "--test-text", path("other.txt"),
         "--compress", "1", path("text2.h5")])
    train, test = text_streams(sorted(glob.glob(path("text") + "/*.txt")) + [path("text/sub/c.rst")],
                               test_files=[path("other.txt")])
    expect_tokens(path("text2.h5"), "train", train, np.uint8, 256)
    expect_tokens(path("text2.h5"), "test", test, np.uint8, 256)
    expect(run([data, "verify", path("text2.h5")]), "OK: ", "verify of a text conversion")
    expect(run([data, "info", path("text2.h5")]), "filters gzip(1) fletcher32", "info of a text conversion")

    # llm.c shards and raw uint16 of the same tokens: the same streams
    run([data, "convert", "--llmc-bin", path("shard_train_*.bin"), "--test-llmc-bin", path("shard_val_*.bin"),
         path("llmc.h5")])
    run([data, "convert", "--uint16-bin", path("train.bin"), "--test-uint16-bin", path("val.bin"), "--vocab-size",
         "50257", path("raw.h5")])
    expected_train = np.fromfile(path("train.bin"), dtype=np.uint16)
    for name in ("llmc.h5", "raw.h5"):
        expect_tokens(path(name), "train", expected_train, np.uint16, 50257)
        expect_tokens(path(name), "test", np.fromfile(path("val.bin"), dtype=np.uint16), np.uint16, 50257)
    expect(run([data, "verify", path("llmc.h5")]), ":/train: 3700 tokens read back", "verify of llm.c shards")

    # bad files exit 1 with their message and leave nothing behind
    failed = path("failed.h5")
    for args, message in (
            (["--llmc-bin", path("bad_magic.bin")], "bad_magic.bin: magic number 12345 (header[0]), expected 20240520"),
            (["--llmc-bin", path("cut_short.bin")], "cut_short.bin: 7024 bytes, but its header announces 3001 tokens"),
            (["--llmc-bin", path("big_token.bin")], "big_token.bin: token 2 is 50257, not below the vocabulary size "
                                                    "50257 (the default of these files)"),
            (["--uint16-bin", path("train.bin")], "--uint16-bin needs --vocab-size V"),
            (["--uint16-bin", path("train.bin"), "--vocab-size", "1000"], "train.bin: token "),
            (["--text", path("text/*.md")], "the pattern matches no file"),
            (["--text", path("nothing")], "nothing: no such file or directory")):
        expect(run([data, "convert"] + args + [failed], expect_rc=1), message, " ".join(args))
        if os.path.exists(failed) or os.path.exists(failed + ".tmp"):
            raise SystemExit("FAIL: a failed convert left " + failed + " or its .tmp")

    # usage: exit 2 with the usage text; --help of every subcommand names the token inputs
    for args in (["convert", "--text", path("other.txt")], ["convert", "--text", path("other.txt"), "out"],
                 ["convert", "--text", path("other.txt"), "--test-fraction", "1.5", failed],
                 ["convert", "--text", path("other.txt"), "--test-fraction", "0.1", "--test-text", "x", failed],
                 ["convert", "--text", path("other.txt"), "--vocab-size", "300", failed],
                 ["convert", "--text", path("other.txt"), "--llmc-bin", "x.bin", failed],
                 ["convert", "--llmc-bin", "x.bin", "--test-text", "y", failed],
                 ["convert", "--npy", "a", "b", "--vocab-size", "3", failed],
                 ["bench", path("good_h5py.h5"), "--context", "8"]):
        expect(run([data] + args, expect_rc=2), "usage: drtrain-data convert", " ".join(args))
    for command in ("convert", "info", "verify", "synth", "bench"):
        out = run([data, command, "--help"])
        for needle in ("--text", "--llmc-bin", "--uint16-bin", "--test-fraction", "--vocab-size", "token"):
            expect(out, needle, f"drtrain-data {command} --help")
    # a token file is not an image set, and the other way round
    expect(run([data, "bench", path("good_tokens.h5"), "--context", "600"], expect_rc=1),
           "the corpus has 500 tokens, shorter than one window of --context 600 + 1", "bench --context 600")
    print("tokens: ok")


def plan(work, bin_dir):
    data = os.path.join(bin_dir, "drtrain-data")
    path = lambda name: os.path.join(work, name)  # noqa: E731

    def steps(*args):
        return [json.loads(line) for line in run([data, "plan", *args, "--json"]).splitlines()]

    # 103 samples at batch 10: 11 steps, the last of 3; each sample once per epoch
    epoch0 = steps("--count", "103", "--batch", "10", "--seed", "7")
    if [s["step"] for s in epoch0] != list(range(11)) or [len(s["samples"]) for s in epoch0] != [10] * 10 + [3]:
        raise SystemExit(f"FAIL: plan --count 103 --batch 10: steps {[(s['step'], len(s['samples'])) for s in epoch0]}")
    if sorted(i for s in epoch0 for i in s["samples"]) != list(range(103)):
        raise SystemExit("FAIL: plan: an epoch does not take every sample exactly once")
    if steps("--count", "103", "--batch", "10", "--seed", "7") != epoch0:
        raise SystemExit("FAIL: plan: two runs with one seed differ")
    if steps("--count", "103", "--batch", "10", "--seed", "8")[0]["samples"] == epoch0[0]["samples"]:
        raise SystemExit("FAIL: plan: seeds 7 and 8 take the same first batch")
    # the order of an epoch does not depend on the batch: batch 20 takes pairs of batch 10's
    pairs = steps("--count", "103", "--batch", "20", "--seed", "7")
    if [i for s in pairs for i in s["samples"]] != [i for s in epoch0 for i in s["samples"]]:
        raise SystemExit("FAIL: plan: --batch 20 takes the samples in another order than --batch 10")
    # --steps beyond the epoch runs on into epoch 1, which --epoch 1 prints alike
    long = steps("--count", "103", "--batch", "10", "--seed", "7", "--steps", "14")
    epoch1 = steps("--count", "103", "--batch", "10", "--seed", "7", "--epoch", "1", "--steps", "3")
    if long[:11] != epoch0 or long[11:] != epoch1 or [s["step"] for s in epoch1] != [11, 12, 13] or \
            [s["epoch"] for s in epoch1] != [1] * 3 or epoch1[0]["samples"] == epoch0[0]["samples"]:
        raise SystemExit(f"FAIL: plan --steps 14 / --epoch 1: {long[11:]} vs {epoch1}")
    # parts: 2 workers x 2 towers, 3 samples each; the text form separates them by |
    text = run([data, "plan", "--count", "103", "--batch", "12", "--seed", "7", "--workers", "2", "--towers", "2",
                "--steps", "1"])
    expect(text, "103 samples, global batch 12 (2 worker(s) x 2 tower(s)), seed 7: 9 steps per epoch", "plan header")
    first = text.splitlines()[1]
    if not first.startswith("step 0 epoch 0 step_in_epoch 0: ") or \
            [len(p.split()) for p in first.split(":", 1)[1].split("|")] != [3, 3, 3, 3]:
        raise SystemExit(f"FAIL: plan --workers 2 --towers 2: {first!r}")
    # a token file: its windows at --context (500 tokens, context 8: 62 windows)
    out = run([data, "plan", path("good_tokens.h5"), "--context", "8", "--batch", "4", "--steps", "2"])
    expect(out, "# 62 windows of 8 tokens in ", "plan on a token file")
    if len(steps(path("good_tokens.h5"), "--context", "8", "--batch", "31")) != 2:
        raise SystemExit("FAIL: plan of 62 windows at batch 31 is not 2 steps")
    for args, message in ((["--count", "10"], "plan needs --batch B"),
                          ([path("good_tokens.h5"), "--batch", "4"], "holds a token stream: pass --context T"),
                          (["--count", "10", "--batch", "6", "--workers", "4"], "is not divisible by workers x towers"),
                          ([path("good_h5py.h5"), "--context", "8", "--batch", "4"],
                           "--context goes with token files")):
        expect(run([data, "plan"] + args, expect_rc=2), message, "plan " + " ".join(args))
    print("plan: ok")


def pydoc(work, bin_dir, root):
    src = "/usr/share/doc/python3.11/html/_sources"
    if not os.path.isdir(src):
        print(f"SKIP: {src} is missing: install the Debian package python3.11-doc (scripts/install_deps.sh)")
        return 77
    outs = [os.path.join(work, f"pydoc{i}.h5") for i in (1, 2)]
    env = dict(os.environ, DRT_BUILD=os.path.dirname(os.path.abspath(bin_dir)))
    for out in outs:
        p = subprocess.run([os.path.join(root, "scripts", "make_text_corpus.sh"), out], env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        if p.returncode != 0:
            print(p.stdout)
            raise SystemExit(f"FAIL: make_text_corpus.sh {out} exited {p.returncode}")
        expect(p.stdout, "OK: " + out, "make_text_corpus.sh verifies what it wrote")
    files = text_files(src)
    train, test = text_streams(files, 0.05)
    size = sum(os.path.getsize(f) for f in files)
    for out in outs:
        expect_tokens(out, "train", train, np.uint8, 256)
        expect_tokens(out, "test", test, np.uint8, 256)
    print(f"pydoc: {len(files)} files, {size} bytes: /train {len(train)} tokens, /test {len(test)} tokens, twice")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=["fixture", "tool", "tokens", "plan", "pydoc"])
    a = ap.parse_args()
    if a.case == "fixture":
        fixture(a.work)
    elif a.case == "tool":
        tool(a.work, a.bin)
    elif a.case == "tokens":
        tokens(a.work, a.bin)
    elif a.case == "plan":
        plan(a.work, a.bin)
    else:
        return pydoc(a.work, a.bin, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


if __name__ == "__main__":
    sys.exit(main())
