#!/usr/bin/env python3
"""Writes broken copies of a Fashion-MNIST directory for the bad-input tests.

usage: make_bad_data.py SOURCE_DIR OUT_DIR
  OUT_DIR/missing/     no files at all
  OUT_DIR/truncated/   train images cut off after the header and 1000 pixels (gzip'd)
  OUT_DIR/corrupt/     train images with bytes flipped inside the compressed stream
The other three files are copies of the real ones.
"""
import gzip
import os
import shutil
import sys

src, out = sys.argv[1], sys.argv[2]
names = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
for sub in ("missing", "truncated", "corrupt"):
    os.makedirs(os.path.join(out, sub), exist_ok=True)
for sub in ("truncated", "corrupt"):
    for name in names[1:]:
        shutil.copyfile(os.path.join(src, name), os.path.join(out, sub, name))

with gzip.open(os.path.join(src, names[0]), "rb") as f:
    head = f.read(16 + 1000)
with gzip.open(os.path.join(out, "truncated", names[0]), "wb") as f:
    f.write(head)

raw = bytearray(open(os.path.join(src, names[0]), "rb").read())
middle = len(raw) // 2
for i in range(middle, middle + 64):
    raw[i] ^= 0xA5
open(os.path.join(out, "corrupt", names[0]), "wb").write(bytes(raw))
