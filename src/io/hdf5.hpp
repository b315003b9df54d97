// HDF5 plumbing (internal to io): RAII for hid_t handles, DRT_H5_CHECK (HDF5's own error stack
// in the message, its automatic printing turned off), typed attribute helpers, and the
// selection of a flat element range of a row-major dataset.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace drt::io {

// Owns one HDF5 identifier and closes it with the matching H5?close. Move-only.
class H5Id {
 public:
  H5Id() = default;
  explicit H5Id(hid_t id) : id_(id) {}
  ~H5Id() { reset(); }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  H5Id(H5Id&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  H5Id& operator=(H5Id&& other) noexcept;
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: handles go straight into H5 calls
  void reset() noexcept;
  // Gives up ownership (e.g. to close a file with a checked H5Fclose).
  hid_t release() noexcept {
    const hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Turns off HDF5's printing of error stacks (drtrain reports them in its own errors). Once.
void quiet_hdf5_errors();
// The innermost messages of HDF5's current error stack, e.g. "truncated file: eof = 1024, ...".
std::string hdf5_error_stack();

// Throws drt::Error("<what>: <HDF5's messages>") when `result` is negative (or an invalid id).
hid_t check_h5(hid_t result, const std::string& what);
#define DRT_H5_CHECK(call, what) ::drt::io::check_h5(static_cast<hid_t>(call), (what))

// Attributes of a file, group or dataset.
void write_attribute(hid_t object, const std::string& name, std::int64_t value);
void write_attribute(hid_t object, const std::string& name, std::uint64_t value);
void write_attribute(hid_t object, const std::string& name, double value);
void write_attribute(hid_t object, const std::string& name, const std::string& value);  // fixed-length string
void write_attribute(hid_t object, const std::string& name, const std::vector<std::uint64_t>& values);
bool has_attribute(hid_t object, const std::string& name);
std::int64_t read_int_attribute(hid_t object, const std::string& name);
std::uint64_t read_uint_attribute(hid_t object, const std::string& name);
double read_double_attribute(hid_t object, const std::string& name);
std::string read_string_attribute(hid_t object, const std::string& name);
std::vector<std::uint64_t> read_uint_array_attribute(hid_t object, const std::string& name);

// Names of the links (groups, datasets) in `group`, in creation order when the group tracks it,
// else by name.
std::vector<std::string> link_names(hid_t group);

// Selects, in `file_space` (a simple dataspace of `shape`), the elements whose row-major flat
// index lies in [begin, end), as a union of hyperslabs (at most two per dimension).
void select_flat_range(hid_t file_space, const std::vector<hsize_t>& shape, hsize_t begin, hsize_t end);

}  // namespace drt::io
