// Fuzz target: drt::io::CheckpointFile, the serial checkpoint reader behind drtrain-ckpt and
// --resume's first check: opens a file written from the input, then meta(), slot_names(),
// datasets(), read() of each dataset and verify().
//
// Like drtrain-ckpt, it opens files with HDF5's default (serial) driver and needs no MPI_Init.
// Expected: success, or io::CheckpointError / drt::ConfigError (a newer format version) /
// drt::Error. Anything else escaping, or a sanitizer report, is a finding; a crash inside
// libhdf5 itself on a malformed file is a known library limitation (fuzz/README.md).
//
// Tensors that the file declares larger than kMaxElements are not read (nor verify()d): HDF5
// hands back fill values for storage that was never written, so a few hundred bytes can declare
// gigabytes, which read() would legitimately allocate; that is outside this target's budget.
// Their shapes still go through read()'s size checks when the declared element count overflows
// 64 bits. A tensor that read() returns must hold exactly the elements its shape describes.
#include <hdf5.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/io/checkpoint.hpp"
#include "fuzz_util.hpp"

namespace {

constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 22;  // 16 MiB of floats

enum class Size { kSmall, kLarge, kOverflow, kUnknown };

// The element count `path` declares, classified; opened with the raw HDF5 API, not our code.
Size declared_size(const std::string& file_path, const std::string& dataset) {
  Size result = Size::kUnknown;
  const hid_t file = H5Fopen(file_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return result;
  const hid_t dset = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
  if (dset >= 0) {
    const hid_t space = H5Dget_space(dset);
    if (space >= 0) {
      const int rank = H5Sget_simple_extent_ndims(space);
      if (rank >= 0 && rank <= 32) {
        std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
        if (H5Sget_simple_extent_dims(space, dims.data(), nullptr) >= 0) {
          result = Size::kSmall;
          std::uint64_t n = 1;
          for (hsize_t d : dims) {
            if (d != 0 && n > UINT64_MAX / d) {
              result = Size::kOverflow;
              break;
            }
            n *= d;
          }
          if (result == Size::kSmall && n > kMaxElements) result = Size::kLarge;
        }
      }
      H5Sclose(space);
    }
    H5Dclose(dset);
  }
  H5Fclose(file);
  H5Eclear2(H5E_DEFAULT);
  return result;
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_checkpoint: %s\n", what);
  std::abort();
}

}  // namespace

// libhdf5 sizes some allocations from the file's metadata and handles malloc returning null
// (an HDF5 error, which our code turns into CheckpointError); ASan's default of aborting on an
// impossible size (> 1 TiB) would report libhdf5's behaviour, not ours. ASAN_OPTIONS in the
// environment still wins key by key. detect_leaks=0: libhdf5 keeps free lists until exit.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:detect_leaks=0"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // HDF5's error stacks would flood the log
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = drt::fuzz::write_file("checkpoint.h5", data, size);
  try {
    const drt::io::CheckpointFile f(path);
    const drt::io::CheckpointMeta& m = f.meta();
    (void)m;
    (void)f.slot_names();
    bool all_read = true;
    for (const std::string& d : f.datasets()) {
      if (declared_size(path, d) == Size::kLarge) {
        all_read = false;
        continue;
      }
      try {
        const auto t = f.read(d);
        // The values are exactly the elements the shape describes (a shape whose element count
        // does not fit 64 bits must have been refused).
        unsigned __int128 n = 1;
        for (std::int64_t dim : t.shape) {
          if (dim < 0) finding("read() returned a negative dimension");
          n *= static_cast<std::uint64_t>(dim);
          if (n > UINT64_MAX) finding("read() accepted a shape whose element count overflows 64 bits");
        }
        if (n != t.values.size()) finding("read() returned a value count that differs from its shape");
      } catch (const drt::Error&) {
        all_read = false;  // this dataset is bad; try the others
      }
    }
    if (all_read) f.verify();
  } catch (const drt::Error&) {
    // CheckpointError, ConfigError or Error: the documented failures
  }
  return 0;
}
