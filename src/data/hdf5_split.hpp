// A data-set file and one of its splits opened read-only and checked against docs/DATA_FORMAT.md
// (internal to data_hdf5): the handles the reader and the header functions use, the checks and
// their messages, and the lock every HDF5 call of data_hdf5 holds.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

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

// An open data-set file whose root attributes have been checked: an image set (`classes`), or a
// token set (`vocab_size`; a split holds `tokens`), never both (docs/DATA_FORMAT.md).
struct DataFile {
  std::string path;
  io::H5Id file;
  std::int64_t classes = 0;     // image sets
  std::int64_t vocab_size = 0;  // token sets
  bool tokens = false;          // a token set: vocab_size set, /train/tokens or /test/tokens
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

// "[10, 3, 4]"
std::string shape_text(const std::vector<std::int64_t>& shape);

// The storage of `dataset`; the first filter this HDF5 library lacks goes to `missing` (when
// given and still empty).
DatasetStorage describe_storage(hid_t dataset, std::string* missing);

// Opens the object `name` under `location` (at `path` in `file`), which must exist and be of
// `kind` (H5I_GROUP or H5I_DATASET); ConfigError naming the object and `missing_fix` otherwise.
io::H5Id open_object(const std::string& file, const std::string& path, hid_t location, const std::string& name,
                     H5I_type_t kind, const std::string& missing_fix);

// An access property list with a chunk cache of `bytes` for a dataset stored as `storage`, with
// elements of `element_bytes`.
io::H5Id chunk_cache_access(const DatasetStorage& storage, std::size_t element_bytes, std::size_t bytes);

// The text of a string attribute, fixed or variable length (h5py writes variable-length
// strings). Throws ConfigError naming the file and object when it is not a scalar string.
std::string read_text_attribute(const std::string& file, const std::string& object, hid_t holder,
                                const std::string& name);

}  // namespace drt::data::h5
