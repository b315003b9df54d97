// drtrain's HDF5 data-set format (docs/DATA_FORMAT.md): its version, the pixel types and axis
// layouts it allows, and what a split's header says (for tools such as drtrain-data info).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace drt::data {

// The root attribute `drtrain_dataset` of every data-set file.
constexpr std::int64_t kDataFormatVersion = 1;

enum class PixelType { kUint8, kFloat32 };
enum class Layout { kNCHW, kNHWC };

const char* pixel_type_name(PixelType type);  // "uint8", "float32"
std::size_t pixel_bytes(PixelType type);      // 1, 4
const char* layout_name(Layout layout);       // "NCHW", "NHWC"
// "uint8"/"float32" and "NCHW"/"NHWC"; anything else throws ConfigError naming `what` (the
// option or attribute the text came from) and the choices.
PixelType parse_pixel_type(const std::string& text, const std::string& what);
Layout parse_layout(const std::string& text, const std::string& what);

// How one HDF5 dataset is stored.
struct DatasetStorage {
  std::string type;  // "uint8", "int64", "float32", "float64 (big-endian)", ...
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> chunk;   // empty when the dataset is contiguous
  std::vector<std::string> filters;  // "gzip(4)", "fletcher32", "shuffle", ...
  std::int64_t storage_bytes = 0;    // allocated in the file
};

// One split of a data-set file, its header checked (open_hdf5_source's checks).
struct SplitHeader {
  std::string file, split;  // split: "train" or "test"
  std::int64_t count = 0;
  int channels = 0, height = 0, width = 0;
  std::int64_t classes = 0;  // root attribute
  std::string class_names;   // root attribute, comma-separated; empty when absent
  std::string source;        // root attribute: where the data came from; empty when absent
  PixelType pixel_type = PixelType::kUint8;
  Layout layout = Layout::kNCHW;
  DatasetStorage images, labels;
  std::vector<float> mean, stddev;  // empty when the split stores none
  std::string stats_from;           // their attribute `computed_from` ("train"), if any
};

// The splits FILE holds ("train", "test", in that order), after checking the file's root
// (HDF5, format version, classes). Throws ConfigError naming the file and the problem.
std::vector<std::string> list_splits(const std::string& file);

// FILE's split ("train" or "test"), its header validated. Throws ConfigError.
SplitHeader read_split_header(const std::string& file, const std::string& split);

// Samples per class in FILE's split (reads every label; a label outside [0, classes) throws
// ConfigError naming the file, the split, the sample and the value).
std::vector<std::int64_t> count_classes(const std::string& file, const std::string& split);

}  // namespace drt::data
