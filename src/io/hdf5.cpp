#include "hdf5.hpp"

#include <mutex>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::io {

H5Id& H5Id::operator=(H5Id&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void H5Id::reset() noexcept {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: H5Idec_ref(id_); break;
  }
  id_ = H5I_INVALID_HID;
}

void quiet_hdf5_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::string hdf5_error_stack() {
  std::vector<std::string> lines;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        if (e->desc && *e->desc) static_cast<std::vector<std::string>*>(data)->push_back(e->desc);
        return 0;
      },
      &lines);
  H5Eclear2(H5E_DEFAULT);
  // The last messages are the innermost causes; keep the two most specific.
  if (lines.size() > 2) lines.erase(lines.begin(), lines.end() - 2);
  return lines.empty() ? std::string("HDF5 reported no details") : join(lines, "; ");
}

hid_t check_h5(hid_t result, const std::string& what) {
  if (result < 0) throw Error(str(what, ": ", hdf5_error_stack()));
  return result;
}

namespace {

H5Id scalar_space() { return H5Id(DRT_H5_CHECK(H5Screate(H5S_SCALAR), "H5Screate")); }

void write_raw(hid_t object, const std::string& name, hid_t file_type, hid_t mem_type, hid_t space, const void* data) {
  if (H5Aexists(object, name.c_str()) > 0) DRT_H5_CHECK(H5Adelete(object, name.c_str()), "H5Adelete " + name);
  H5Id attr(DRT_H5_CHECK(H5Acreate2(object, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                         "creating attribute " + name));
  DRT_H5_CHECK(H5Awrite(attr, mem_type, data), "writing attribute " + name);
}

H5Id open_attribute(hid_t object, const std::string& name) {
  if (H5Aexists(object, name.c_str()) <= 0) throw Error(str("attribute '", name, "' is missing"));
  return H5Id(DRT_H5_CHECK(H5Aopen(object, name.c_str(), H5P_DEFAULT), "opening attribute " + name));
}

template <typename T>
T read_scalar(hid_t object, const std::string& name, hid_t mem_type, H5T_class_t expected) {
  H5Id attr = open_attribute(object, name);
  H5Id type(DRT_H5_CHECK(H5Aget_type(attr), "H5Aget_type"));
  H5Id space(DRT_H5_CHECK(H5Aget_space(attr), "H5Aget_space"));
  if (H5Tget_class(type) != expected || H5Sget_simple_extent_npoints(space) != 1)
    throw Error(str("attribute '", name, "' has the wrong type or size"));
  T value{};
  DRT_H5_CHECK(H5Aread(attr, mem_type, &value), "reading attribute " + name);
  return value;
}

}  // namespace

void write_attribute(hid_t object, const std::string& name, std::int64_t value) {
  write_raw(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, scalar_space(), &value);
}

void write_attribute(hid_t object, const std::string& name, std::uint64_t value) {
  write_raw(object, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, scalar_space(), &value);
}

void write_attribute(hid_t object, const std::string& name, double value) {
  write_raw(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, scalar_space(), &value);
}

void write_attribute(hid_t object, const std::string& name, const std::string& value) {
  // Fixed length (parallel HDF5 writes no variable-length data); h5py reads it as bytes.
  H5Id type(DRT_H5_CHECK(H5Tcopy(H5T_C_S1), "H5Tcopy"));
  DRT_H5_CHECK(H5Tset_size(type, std::max<std::size_t>(1, value.size())), "H5Tset_size");
  DRT_H5_CHECK(H5Tset_strpad(type, H5T_STR_NULLPAD), "H5Tset_strpad");
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  write_raw(object, name, type, type, scalar_space(), padded.data());
}

void write_attribute(hid_t object, const std::string& name, const std::vector<std::uint64_t>& values) {
  const hsize_t n = values.size();
  H5Id space(DRT_H5_CHECK(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
  write_raw(object, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, space, values.data());
}

bool has_attribute(hid_t object, const std::string& name) { return H5Aexists(object, name.c_str()) > 0; }

std::int64_t read_int_attribute(hid_t object, const std::string& name) {
  return read_scalar<std::int64_t>(object, name, H5T_NATIVE_INT64, H5T_INTEGER);
}

std::uint64_t read_uint_attribute(hid_t object, const std::string& name) {
  return read_scalar<std::uint64_t>(object, name, H5T_NATIVE_UINT64, H5T_INTEGER);
}

double read_double_attribute(hid_t object, const std::string& name) {
  return read_scalar<double>(object, name, H5T_NATIVE_DOUBLE, H5T_FLOAT);
}

std::string read_string_attribute(hid_t object, const std::string& name) {
  H5Id attr = open_attribute(object, name);
  H5Id type(DRT_H5_CHECK(H5Aget_type(attr), "H5Aget_type"));
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) > 0)
    throw Error(str("attribute '", name, "' is not a fixed-length string"));
  const std::size_t size = H5Tget_size(type);
  if (size == 0 || size > (std::size_t{64} << 20)) throw Error(str("attribute '", name, "' has a bad size"));
  std::string value(size, '\0');
  DRT_H5_CHECK(H5Aread(attr, type, value.data()), "reading attribute " + name);
  value.resize(value.find('\0') == std::string::npos ? value.size() : value.find('\0'));
  return value;
}

std::vector<std::uint64_t> read_uint_array_attribute(hid_t object, const std::string& name) {
  H5Id attr = open_attribute(object, name);
  H5Id space(DRT_H5_CHECK(H5Aget_space(attr), "H5Aget_space"));
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0 || n > (1 << 24)) throw Error(str("attribute '", name, "' has a bad size"));
  std::vector<std::uint64_t> values(static_cast<std::size_t>(n));
  DRT_H5_CHECK(H5Aread(attr, H5T_NATIVE_UINT64, values.data()), "reading attribute " + name);
  return values;
}

std::vector<std::string> link_names(hid_t group) {
  auto collect = [group](H5_index_t index) {
    std::vector<std::string> names;
    const herr_t rc = H5Literate(
        group, index, H5_ITER_INC, nullptr,
        [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
          static_cast<std::vector<std::string>*>(out)->push_back(name);
          return 0;
        },
        &names);
    if (rc < 0) H5Eclear2(H5E_DEFAULT);
    return rc < 0 ? std::vector<std::string>{} : names;
  };
  std::vector<std::string> names = collect(H5_INDEX_CRT_ORDER);  // fails without order tracking
  return names.empty() ? collect(H5_INDEX_NAME) : names;
}

namespace {

// Adds to the selection the elements with flat index in [begin, end) of the sub-array that
// starts at dimension `dim` with the leading coordinates fixed to `prefix`.
void select_range(hid_t space, const std::vector<hsize_t>& shape, std::vector<hsize_t>& prefix, std::size_t dim,
                  hsize_t begin, hsize_t end, bool& first) {
  if (begin >= end) return;
  hsize_t inner = 1;
  for (std::size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::size_t rank = shape.size();
  auto add = [&](hsize_t row_begin, hsize_t rows) {  // whole rows [row_begin, row_begin + rows) of dim
    std::vector<hsize_t> start(rank, 0), count(rank, 1);
    for (std::size_t d = 0; d < dim; ++d) start[d] = prefix[d];
    start[dim] = row_begin;
    count[dim] = rows;
    for (std::size_t d = dim + 1; d < rank; ++d) count[d] = shape[d];
    DRT_H5_CHECK(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr, count.data(),
                                     nullptr),
                 "H5Sselect_hyperslab");
    first = false;
  };
  const hsize_t first_row = begin / inner, last_row = (end - 1) / inner;
  const bool begins_mid = begin % inner != 0, ends_mid = end % inner != 0;
  if (first_row == last_row && (begins_mid || ends_mid)) {  // inside one row: go down a dimension
    prefix[dim] = first_row;
    select_range(space, shape, prefix, dim + 1, begin - first_row * inner, end - first_row * inner, first);
    return;
  }
  hsize_t full_begin = first_row, full_end = last_row + 1;
  if (begins_mid) {
    prefix[dim] = first_row;
    select_range(space, shape, prefix, dim + 1, begin - first_row * inner, inner, first);
    ++full_begin;
  }
  if (ends_mid) --full_end;
  if (full_end > full_begin) add(full_begin, full_end - full_begin);
  if (ends_mid) {
    prefix[dim] = last_row;
    select_range(space, shape, prefix, dim + 1, 0, end - last_row * inner, first);
  }
}

}  // namespace

void select_flat_range(hid_t file_space, const std::vector<hsize_t>& shape, hsize_t begin, hsize_t end) {
  if (begin >= end) {
    DRT_H5_CHECK(H5Sselect_none(file_space), "H5Sselect_none");
    return;
  }
  std::vector<hsize_t> prefix(shape.size(), 0);
  bool first = true;
  select_range(file_space, shape, prefix, 0, begin, end, first);
}

}  // namespace drt::io
