// A NumPy .npy file (format versions 1 to 3) opened for reading in rows: the header parsed and
// checked against the file's size, then any range of rows read without loading the array.
// C order and little-endian (or one-byte) element types only, which is what np.save writes on
// the machines drtrain runs on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace drt::data {

struct NpyHeader {
  std::string descr;  // "<u1", "|u1", "<f4", "<i8", ...
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// Parses the header's Python dict literal, e.g. "{'descr': '<f4', 'fortran_order': False,
// 'shape': (10, 28, 28), }". Throws ConfigError naming `path` and what is wrong.
NpyHeader parse_npy_header(const std::string& text, const std::string& path);

class NpyFile {
 public:
  // Opens and checks PATH: magic, version, header, a supported C-order element type, and that
  // the file holds exactly the bytes the shape announces. Throws ConfigError naming the file.
  explicit NpyFile(const std::string& path);
  ~NpyFile();
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;

  const std::string& path() const { return path_; }
  const NpyHeader& header() const { return header_; }
  const std::vector<std::int64_t>& shape() const { return header_.shape; }
  char kind() const { return kind_; }                   // 'u', 'i', 'f' or 'b'
  std::size_t item_size() const { return item_size_; }  // bytes per element
  std::string dtype_name() const;                       // "uint8", "float32", "int64", ...
  std::int64_t rows() const;                            // shape[0] (1 for a 0-d array)
  std::size_t row_bytes() const;                        // bytes of one row (all but the first axis)

  // Rows [first, first + count) as stored (little-endian), to `out` (count * row_bytes()).
  void read_rows(std::int64_t first, std::int64_t count, void* out) const;
  // Rows [first, first + count) of a 1-D integer array as int64 (ConfigError for another kind,
  // or a uint64 value above 2^63 - 1).
  std::vector<std::int64_t> read_integers(std::int64_t first, std::int64_t count) const;

 private:
  void check();  // the constructor's checks, on the open file
  // check()'s pieces: the magic, version and header dictionary (header_, data_offset_); the dtype
  // (kind_, item_size_); the data's size against the shape's.
  void read_header(std::uint64_t file_size);
  void check_dtype();
  void check_data_size(std::uint64_t file_size) const;

  std::string path_;
  int fd_ = -1;
  NpyHeader header_;
  char kind_ = 0;
  std::size_t item_size_ = 0;
  std::uint64_t data_offset_ = 0;
};

}  // namespace drt::data
