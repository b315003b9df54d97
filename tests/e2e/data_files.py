#!/usr/bin/python3
"""drtrain-data end to end, on files written by h5py and numpy (run by ctest; tests/CMakeLists.txt).

usage: data_files.py --bin BUILD/bin --work DIR CASE
CASE:
  fixture  writes DIR/good_h5py.h5 (what a user writes with h5py: contiguous float32 NHWC images,
           int64 labels, variable-length string attributes, mean/std), the .npy arrays of the
           tool case, and broken files for the bad_input.data_* tests (each with what is wrong
           in its name): wrong_rank, float64, no_layout, bad_layout, count_mismatch,
           label_range, no_version, no_classes, truncated, corrupt_chunk, not_hdf5
  tool     drtrain-data on them: verify accepts the h5py file and reads back what h5py wrote;
           convert --npy of numpy arrays (both layouts, uint8 and float32, a test split,
           --normalize) reads back with h5py as the arrays were; info lists the splits, chunks,
           filters and samples per class; synth is deterministic in its seed and honours
           --dtype, --layout and --chunk-kib; a failed convert
           leaves neither OUT nor OUT.tmp; bad usage exits 2, a bad file 1
"""
import argparse
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
    print(f"fixture: files in {work}")


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=["fixture", "tool"])
    a = ap.parse_args()
    if a.case == "fixture":
        fixture(a.work)
    else:
        tool(a.work, a.bin)


if __name__ == "__main__":
    sys.exit(main())
