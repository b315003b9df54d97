#!/usr/bin/python3
"""Training from HDF5 data sets end to end (tests/CMakeLists.txt, train_hdf5.*).

  fixture     drtrain-data convert of the real Fashion-MNIST IDX files into WORK/fm.h5, and a copy
              WORK/bad.h5 whose every third chunk of /train/images has bytes flipped on disk
  same-as-idx 1 PS + 2 workers, MLP, 40 steps, --deterministic: from fm.h5 and from the IDX files
              the final checkpoints are bitwise equal (same floats, same data order)
  corrupt     training from bad.h5 stops at once, every rank, with the file, the dataset and
              'drtrain-data verify' in the message; non-zero exit, no hang
  augment     --augment crop:2,flip --normalize M/S from fm.h5: 30 steps straight and 15 steps +
              --resume to 30 give bitwise equal checkpoints (the draws depend on (seed, epoch,
              sample) only); the augmented run's checkpoint differs from an unaugmented one

usage: train_hdf5.py --bin BUILD/bin --mpiexec "mpiexec FLAGS" --work DIR CASE
"""
import argparse
import os
import shutil

import h5py

from e2e_util import expect, run

FASHION = "/usr/share/datasets/fashion-mnist"


class Case:
    def __init__(self, a):
        self.a = a
        self.fm = os.path.join(a.work, "fm.h5")
        self.bad = os.path.join(a.work, "bad.h5")

    def drtrain(self, *args, expect_ok=True):
        cmd = self.a.mpiexec.split() + ["-n", "3", os.path.join(self.a.bin, "drtrain"), "--num-ps", "1",
                                        "--batch-size", "64", "--log-every", "1000", "--test-samples", "500"]
        return run(cmd + list(args), expect_ok)

    def same(self, a, b, what):
        code, out = run([os.path.join(self.a.bin, "drtrain-ckpt"), "diff", a, b, "--rtol", "0"], expect_ok=None)
        if code != 0:
            print(out)
            raise SystemExit(f"FAIL: {what}: the checkpoints differ")

    def fresh(self, name):
        path = os.path.join(self.a.work, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def fixture(self):
        os.makedirs(self.a.work, exist_ok=True)
        for f in (self.fm, self.bad):
            if os.path.exists(f):
                os.remove(f)
        run([os.path.join(self.a.bin, "drtrain-data"), "convert", "--idx", FASHION, self.fm])
        shutil.copyfile(self.fm, self.bad)
        with h5py.File(self.bad, "r") as f:
            images = f["/train/images"]
            chunks = [images.id.get_chunk_info(i) for i in range(0, images.id.get_num_chunks(), 3)]
        with open(self.bad, "r+b") as f:
            for c in chunks:
                f.seek(c.byte_offset + c.size // 2)
                b = f.read(4)
                f.seek(c.byte_offset + c.size // 2)
                f.write(bytes(x ^ 0xFF for x in b))
        print(f"fixture: {self.fm}, and {self.bad} with {len(chunks)} corrupt chunks")

    def same_as_idx(self):
        idx, h5 = self.fresh("idx"), self.fresh("h5")
        common = ["--max-steps", "40", "--deterministic", "--checkpoint-dir"]
        self.drtrain(*common, idx)
        _, out = self.drtrain(*common, h5, "--dataset", "hdf5", "--data-file", self.fm)
        expect(out, "60000 train, 500 test images of 1x28x28, 10 classes", "the data line")
        self.same(os.path.join(idx, "ckpt-00000040.h5"), os.path.join(h5, "ckpt-00000040.h5"), "IDX vs HDF5")
        print("same-as-idx: the HDF5 run's checkpoint equals the IDX run's bitwise")

    def corrupt(self):
        code, out = self.drtrain("--max-steps", "40", "--dataset", "hdf5", "--data-file", self.bad, expect_ok=False)
        expect(out, "fatal error on rank", "a fatal error")
        expect(out, f"the training data: {self.bad}: /train/images: cannot read sample", "the file and dataset")
        expect(out, f"check it with drtrain-data verify {self.bad}", "the fix")
        print(f"corrupt: exit {code} with the message")

    def augment(self):
        straight, resumed, plain = self.fresh("aug-straight"), self.fresh("aug-resumed"), self.fresh("aug-plain")
        common = ["--dataset", "hdf5", "--data-file", self.fm, "--deterministic", "--eval", "false",
                  "--augment", "crop:2,flip", "--normalize", "0.286/0.353"]
        self.drtrain(*common, "--max-steps", "30", "--checkpoint-dir", straight)
        self.drtrain(*common, "--max-steps", "15", "--checkpoint-dir", resumed)
        _, out = self.drtrain(*common, "--max-steps", "30", "--checkpoint-dir", resumed, "--resume")
        expect(out, "resuming from", "the resume")
        self.same(os.path.join(straight, "ckpt-00000030.h5"), os.path.join(resumed, "ckpt-00000030.h5"),
                  "augmented: straight vs resumed")
        self.drtrain(*[x for x in common if x not in ("--augment", "crop:2,flip")], "--max-steps", "30",
                     "--checkpoint-dir", plain)
        code, _ = run([os.path.join(self.a.bin, "drtrain-ckpt"), "diff", os.path.join(straight, "ckpt-00000030.h5"),
                       os.path.join(plain, "ckpt-00000030.h5"), "--rtol", "0"], expect_ok=None)
        if code == 0:
            raise SystemExit("FAIL: --augment changed nothing")
        print("augment: resumed == straight bitwise; augmentation changes the run")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("case", choices=["fixture", "same-as-idx", "corrupt", "augment"])
    a = p.parse_args()
    c = Case(a)
    {"fixture": c.fixture, "same-as-idx": c.same_as_idx, "corrupt": c.corrupt, "augment": c.augment}[a.case]()


if __name__ == "__main__":
    main()
