// A data-set file and one of its splits opened read-only and checked against docs/DATA_FORMAT.md
// (internal to data_hdf5): the handles the reader and the header functions use, the checks and
// their messages, and the lock every HDF5 call of data_hdf5 holds.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "drtrain/data/hdf5_format.hpp"
#include "io/hdf5.hpp"

namespace drt::data::h5 {

// Debian's HDF5 is not thread-safe: data_hdf5 makes every HDF5 call holding this lock.
std::recursive_mutex& hdf5_mutex();

// Throws ConfigError("FILE: OBJECT: PROBLEM"); OBJECT ("/train/images") may be empty.
[[noreturn]] void fail(const std::string& file, const std::string& object, const std::string& problem);

// A label outside [0, classes): names the file, the split, the sample and the value.
[[noreturn]] void fail_label(const SplitHeader& header, std::int64_t sample, std::int64_t label);
// The same for a label given as text (a uint64 above 2^63 - 1, which int64 cannot show).
[[noreturn]] void fail_label(const SplitHeader& header, std::int64_t sample, const std::string& label);

// An open data-set file whose root attributes have been checked.
struct DataFile {
  std::string path;
  io::H5Id file;
  std::int64_t classes = 0;
  std::string class_names, source;
};
DataFile open_data_file(const std::string& path);
// Whether the file has a link named `split` at its root.
bool has_split(const DataFile& file, const std::string& split);

// One split: its datasets open and its header checked.
struct Split {
  DataFile file;
  SplitHeader header;
  io::H5Id images, labels;  // the datasets; images with a chunk cache of the size asked for
  void close() noexcept;    // closes the handles (the caller holds hdf5_mutex())
};
Split open_split(DataFile file, const std::string& split, std::size_t cache_bytes);

// "uint8", "int16", "float64", "float32 (big-endian)", "string", "compound", ...
std::string type_name(hid_t type);

// The text of a string attribute, fixed or variable length (h5py writes variable-length
// strings). Throws ConfigError naming the file and object when it is not a scalar string.
std::string read_text_attribute(const std::string& file, const std::string& object, hid_t holder,
                                const std::string& name);

}  // namespace drt::data::h5
