// CheckpointFile (the serial reader behind drtrain-ckpt and --resume's first check) on files
// that are well-formed HDF5 but hold impossible tensors. Regression tests for fuzz/fuzz_checkpoint
// findings (fuzz/README.md); the files are built here with the HDF5 C API.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "drtrain/io/checkpoint.hpp"

namespace {

void attr_i64(hid_t file, const char* name, std::int64_t v) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Sclose(space);
}

void attr_u64(hid_t file, const char* name, const std::vector<std::uint64_t>& v, bool array) {
  const hsize_t n = v.size();
  const hid_t space = array ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, name, H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_UINT64, v.data());
  H5Aclose(a);
  H5Sclose(space);
}

void attr_str(hid_t file, const char* name, const std::string& v) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, v.size());
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, type, v.data());
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
}

// A checkpoint with complete metadata and /params/ok (2x3, written) and /params/wrap, whose
// shape (2^62 + 1) x 4 has an element count that wraps around 64 bits to 4 (chunked, never
// written: HDF5 accepts it and reads fill values).
std::string write_wrapping_checkpoint() {
  std::string path = ::testing::TempDir() + "drt-wrap-" + std::to_string(::getpid()) + ".h5";
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  for (const char* name : {"format_version", "complete", "step", "epoch", "step_in_epoch", "samples_seen",
                           "global_batch", "num_ps", "num_workers", "towers"})
    attr_i64(file, name, 1);
  for (const char* name : {"drtrain_version", "model", "optimizer", "optimizer_config", "config", "created"})
    attr_str(file, name, "x");
  attr_u64(file, "seed", {1}, false);
  attr_u64(file, "checksum", {0}, false);
  attr_u64(file, "shard_boundaries", {0, 6}, true);
  const hid_t group = H5Gcreate2(file, "/params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t ok_dims[2] = {2, 3};
  const float values[6] = {1, 2, 3, 4, 5, 6};
  hid_t space = H5Screate_simple(2, ok_dims, nullptr);
  hid_t dset = H5Dcreate2(group, "ok", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
  H5Dclose(dset);
  H5Sclose(space);
  const hsize_t wrap_dims[2] = {(hsize_t{1} << 62) + 1, 4}, chunk[2] = {1, 4};
  space = H5Screate_simple(2, wrap_dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 2, chunk);
  dset = H5Dcreate2(group, "wrap", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  EXPECT_GE(dset, 0) << "HDF5 refused the wrapping shape; the test needs another way to build it";
  H5Dclose(dset);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Gclose(group);
  H5Fclose(file);
  return path;
}

// Found with fuzz/fuzz_checkpoint's shape invariant: read() multiplied the dimensions in 64 bits without checking,
// so this tensor came back with its (2^62 + 1) x 4 shape and 4 values.
TEST(CheckpointFile, ReadRefusesAShapeWhoseElementCountWraps) {
  const std::string path = write_wrapping_checkpoint();
  const drt::io::CheckpointFile f(path);
  EXPECT_EQ(f.datasets(), (std::vector<std::string>{"/params/ok", "/params/wrap"}));
  const auto ok = f.read("/params/ok");
  EXPECT_EQ(ok.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(ok.values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  try {
    f.read("/params/wrap");
    ADD_FAILURE() << "read() accepted the shape (2^62 + 1) x 4";
  } catch (const drt::io::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("implausible size [4611686018427387905, 4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.verify(), drt::io::CheckpointError);
  std::remove(path.c_str());
}

}  // namespace
