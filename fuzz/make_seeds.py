#!/usr/bin/python3
"""Writes the seed corpora of fuzz/corpus/idx, fuzz/corpus/npy, fuzz/corpus/config and fuzz/corpus/tokens (input
layouts: fuzz/README.md).

usage: fuzz/make_seeds.py [FUZZ_DIR]   (default: the directory of this script)
The checkpoint seeds come from make_checkpoint_seeds (a C++ program built with the fuzzers).
"""
import gzip
import io
import os
import struct
import sys

import h5py
import numpy as np

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(root, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def idx_images(count, rows, cols, pixels=None):
    body = pixels if pixels is not None else bytes((i * 37) % 256 for i in range(count * rows * cols))
    return struct.pack(">IIII", 0x803, count, rows, cols) + body


def idx_labels(count, labels=None):
    body = labels if labels is not None else bytes(i % 10 for i in range(count))
    return struct.pack(">II", 0x801, count) + body


def idx_input(images, labels, flags=0, classes=10):
    return bytes([flags, classes]) + struct.pack("<H", len(labels)) + labels + images


# IDX: byte 0 flags (bit 0 gzip the images, bit 1 the labels), byte 1 classes, 2-3 label bytes.
write("idx", "plain", idx_input(idx_images(3, 4, 5), idx_labels(3)))
write("idx", "gzip_by_harness", idx_input(idx_images(2, 3, 3), idx_labels(2), flags=3))
write("idx", "gzip_in_input", idx_input(gzip.compress(idx_images(2, 2, 2), 1, mtime=0), gzip.compress(idx_labels(2), 1, mtime=0)))
write("idx", "classes_256", idx_input(idx_images(2, 1, 1), idx_labels(2, bytes([0, 255])), classes=0))
write("idx", "truncated_payload", idx_input(idx_images(4, 2, 2)[:-3], idx_labels(4)))
write("idx", "extra_bytes", idx_input(idx_images(1, 2, 2) + b"\0", idx_labels(1)))
write("idx", "swapped_files", idx_input(idx_labels(1), idx_images(1, 1, 1)))
write("idx", "count_mismatch", idx_input(idx_images(2, 1, 1), idx_labels(3)))
write("idx", "label_too_big", idx_input(idx_images(2, 1, 1), idx_labels(2, bytes([1, 10]))))
write("idx", "huge_header", idx_input(idx_images(100000000, 4096, 4096, b""), idx_labels(100000000, b"")))

# .npy: the bytes of the file (format 1.0 unless named; the header padded with spaces to a
# multiple of 64 bytes and ended by a newline, as numpy writes it).
def npy(descr, shape, body, fortran=False, version=1, header=None):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    text = header if header is not None else (
        "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, "True" if fortran else "False", dims))
    prefix = 10 if version == 1 else 12
    text += " " * ((64 - (prefix + len(text) + 1) % 64) % 64) + "\n"
    size = struct.pack("<H", len(text)) if version == 1 else struct.pack("<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + size + text.encode("latin-1") + body


write("npy", "images_u1", npy("|u1", (3, 2, 2), bytes(range(12))))
write("npy", "images_f4", npy("<f4", (2, 1, 2, 2), struct.pack("<8f", *[i / 8 for i in range(8)])))
write("npy", "labels_i8", npy("<i8", (4,), struct.pack("<4q", 0, 9, 3, -1)))
write("npy", "labels_u8_big", npy("<u8", (2,), struct.pack("<2Q", 1, 2**63 + 5)))
write("npy", "labels_u2_v2", npy("<u2", (3,), struct.pack("<3H", 1, 2, 65535), version=2))
write("npy", "bool_v3", npy("|b1", (2, 3), bytes([0, 1, 1, 0, 1, 0]), version=3))
write("npy", "scalar", npy("<f8", (), struct.pack("<d", 1.5)))
write("npy", "empty_rows", npy("<f4", (0, 28, 28), b""))
write("npy", "fortran", npy("<f4", (2, 2), struct.pack("<4f", 1, 2, 3, 4), fortran=True))
write("npy", "big_endian", npy(">i4", (2,), struct.pack(">2i", 1, 2)))
write("npy", "cut_short", npy("<f4", (4, 4), bytes(30)))
write("npy", "shape_overflow", npy("<f8", (2**40, 2**40), b""))
write("npy", "bad_dict", npy("", (), b"", header="{'descr': '<f4', 'shape': (1,), 'extra': 1}"))

# Config: argv tokens one per line, optionally "%%" and an INI file passed as --config.
write("config", "empty", "")
write("config", "defaults_print", "--print-config\n")
write("config", "help", "--help\n")
write("config", "version", "--version\n")
write("config", "cli_many", "--model\ncnn\n--epochs=3\n--batch-size\n120\n--optimizer\nadamw\n--lr\n0.001\n"
      "--lr-schedule\ncosine\n--warmup-steps\n10\n--num-ps\n2\n--ps-placement\nper-node\n--rma-sync\nfence\n"
      "--wire\nbf16\n--deterministic\n--metrics\nrun.jsonl\n--stop-signals\nTERM,USR1,INT\n")
write("config", "cli_mlp_spec", "--model\nmlp:784-300-100-10\n--dataset\nsynthetic\n--synthetic-train\n600\n"
      "--checkpoint-dir\n/tmp/ck\n--checkpoint-every\n20\n--resume\n--keep\n2\n")
write("config", "cli_bad_value", "--epochs\nmany\n")
write("config", "cli_positional", "stray\n--epochs\n2\n")
write("config", "ini_full", "--epochs\n5\n%%\n# drtrain configuration\nmodel = mlp\ndataset = synthetic\n"
      "epochs = 2\nbatch-size = 64\ndevice = cpu\ncuda-tf32 = false\nseed = 7\noverlap = true\nbucket-kib = 64\n"
      "rma-chunk-kib = 256\nhang-timeout = 30\noptimizer = sgd\nmomentum = 0.9\nnesterov = true\n"
      "lr-schedule = step\nlr-decay-steps = 100\nlr-decay-rate = 0.5\n")
write("config", "ini_sections", "%%\n[layout]\nnum-ps = 1\n[optimizer]\nlr = 0.1\n")
write("config", "ini_bad", "%%\nepochs = \nmodel\n= 3\nunknown-key = 1\n")

# Tokens: byte 0 the parser (0 HDF5, 1 llm.c shard, 2 raw uint16); HDF5: byte 1 the context
# (1 + byte % 64), then the file; the others: the file.
def token_h5(tokens, vocab=300, chunks=None, fletcher32=False, dtype=np.uint16, attrs=None):
    buffer = io.BytesIO()
    with h5py.File(buffer, "w", libver="earliest") as f:
        f.attrs["drtrain_dataset"] = 1
        for key, value in (attrs if attrs is not None else {"vocab_size": vocab}).items():
            f.attrs[key] = value
        f.create_group("train").create_dataset("tokens", data=np.asarray(tokens, dtype=dtype), chunks=chunks,
                                               fletcher32=fletcher32)
    return buffer.getvalue()


def llmc(tokens, magic=20240520, version=1, count=None, width=np.uint16):
    header = np.zeros(256, dtype="<i4")
    header[:3] = magic, version, len(tokens) if count is None else count
    return header.tobytes() + np.asarray(tokens, dtype=width).astype(np.dtype(width).newbyteorder("<")).tobytes()


stream = [(i * 37) % 300 for i in range(200)]
write("tokens", "h5_uint16_contiguous", bytes([0, 3]) + token_h5(stream))
write("tokens", "h5_uint8_chunked_fletcher", bytes([0, 7]) + token_h5([i % 256 for i in range(300)], vocab=256,
                                                                        chunks=(16,), fletcher32=True, dtype=np.uint8))
write("tokens", "h5_uint32_big_endian", bytes([0, 0]) + token_h5(stream, vocab=70000, chunks=(50,), dtype=">u4"))
write("tokens", "h5_token_out_of_range", bytes([0, 3]) + token_h5(stream[:7] + [300] + stream[8:]))
write("tokens", "h5_signed", bytes([0, 3]) + token_h5(stream, dtype=np.int64))
write("tokens", "h5_no_vocab", bytes([0, 3]) + token_h5(stream, attrs={}))
write("tokens", "h5_too_short", bytes([0, 63]) + token_h5(stream[:20]))
write("tokens", "llmc_gpt2", bytes([1]) + llmc([1, 2, 50256, 3]))
write("tokens", "llmc_llama3", bytes([1]) + llmc([1, 128000, 3], magic=20240801, version=7, width=np.uint32))
write("tokens", "llmc_bad_magic", bytes([1]) + llmc([1, 2], magic=12345))
write("tokens", "llmc_cut_short", bytes([1]) + llmc([1, 2], count=3))
write("tokens", "llmc_negative_count", bytes([1]) + llmc([], count=-1))
write("tokens", "uint16_raw", bytes([2]) + np.array([5, 65535, 0], dtype="<u2").tobytes())
write("tokens", "uint16_odd", bytes([2, 1, 2, 3]))
