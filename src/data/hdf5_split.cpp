#include "hdf5_split.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <optional>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/token_format.hpp"

namespace drt::data::h5 {

using io::H5Id;

namespace {

constexpr std::int64_t kMaxSide = 65536;                          // C, H and W each
constexpr std::int64_t kMaxSampleValues = std::int64_t{1} << 28;  // C*H*W: 1 GiB of floats

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> parts;
  parts.reserve(shape.size());
  for (std::int64_t d : shape) parts.push_back(std::to_string(d));
  return "[" + join(parts, ", ") + "]";
}

namespace {

std::vector<std::int64_t> dims_of(hid_t dataset) {
  H5Id space(DRT_H5_CHECK(H5Dget_space(dataset), "H5Dget_space"));
  const int rank = DRT_H5_CHECK(H5Sget_simple_extent_ndims(space), "H5Sget_simple_extent_ndims");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  DRT_H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "H5Sget_simple_extent_dims");
  return {dims.begin(), dims.end()};
}

std::string filter_text(H5Z_filter_t id, const unsigned* values, std::size_t count, const char* name) {
  switch (id) {
    case H5Z_FILTER_DEFLATE: return count > 0 ? str("gzip(", values[0], ")") : "gzip";
    case H5Z_FILTER_FLETCHER32: return "fletcher32";
    case H5Z_FILTER_SHUFFLE: return "shuffle";
    case H5Z_FILTER_SZIP: return "szip";
    case H5Z_FILTER_NBIT: return "nbit";
    case H5Z_FILTER_SCALEOFFSET: return "scaleoffset";
    default: return name && *name ? str(name, " (id ", id, ")") : str("filter ", id);
  }
}

}  // namespace

DatasetStorage describe_storage(hid_t dataset, std::string* missing) {
  DatasetStorage s;
  H5Id type(DRT_H5_CHECK(H5Dget_type(dataset), "H5Dget_type"));
  s.type = type_name(type);
  s.shape = dims_of(dataset);
  s.storage_bytes = static_cast<std::int64_t>(H5Dget_storage_size(dataset));
  H5Id dcpl(DRT_H5_CHECK(H5Dget_create_plist(dataset), "H5Dget_create_plist"));
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(s.shape.size());
    DRT_H5_CHECK(H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), "H5Pget_chunk");
    s.chunk.assign(chunk.begin(), chunk.end());
  }
  const int filters = DRT_H5_CHECK(H5Pget_nfilters(dcpl), "H5Pget_nfilters");
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, values[8] = {};
    std::size_t count = 8;
    char name[256] = {};
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &count, values, sizeof name, name, nullptr);
    DRT_H5_CHECK(id, "H5Pget_filter2");
    s.filters.push_back(filter_text(id, values, count, name));
    if (missing && missing->empty() && H5Zfilter_avail(id) <= 0) *missing = s.filters.back();
  }
  return s;
}

namespace {

// The integer value of a scalar (or one-element) attribute; nullopt when it is absent.
std::optional<std::int64_t> read_int_attribute(const std::string& file, const std::string& object, hid_t holder,
                                               const std::string& name, const std::string& fix) {
  if (H5Aexists(holder, name.c_str()) <= 0) return std::nullopt;
  H5Id attr(DRT_H5_CHECK(H5Aopen(holder, name.c_str(), H5P_DEFAULT), "opening attribute " + name));
  H5Id type(DRT_H5_CHECK(H5Aget_type(attr), "H5Aget_type"));
  H5Id space(DRT_H5_CHECK(H5Aget_space(attr), "H5Aget_space"));
  if (H5Tget_class(type) != H5T_INTEGER || H5Sget_simple_extent_npoints(space) != 1)
    fail(file, object,
         str("attribute '", name, "' is ", H5Sget_simple_extent_npoints(space) == 1 ? "" : "an array of ",
             type_name(type), ", expected one integer; ", fix));
  std::int64_t value = 0;
  DRT_H5_CHECK(H5Aread(attr, H5T_NATIVE_INT64, &value), "reading attribute " + name);
  return value;
}

}  // namespace

// The handle is generic (H5Oopen), so datasets that need an access property list are reopened by
// the caller.
H5Id open_object(const std::string& file, const std::string& path, hid_t location, const std::string& name,
                 H5I_type_t kind, const std::string& missing_fix) {
  const std::string full = path + "/" + name;
  const htri_t exists = H5Lexists(location, name.c_str(), H5P_DEFAULT);
  if (exists <= 0) {
    if (exists < 0) H5Eclear2(H5E_DEFAULT);
    fail(file, path.empty() ? std::string("/") : path,
         str("no ", kind == H5I_GROUP ? "group" : "dataset", " '", name, "'; ", missing_fix));
  }
  const hid_t id = H5Oopen(location, name.c_str(), H5P_DEFAULT);
  if (id < 0) fail(file, full, str("cannot open: ", io::hdf5_error_stack()));
  H5Id object(id);
  const H5I_type_t found = H5Iget_type(object);
  if (found != kind)
    fail(file, full,
         str("is a ",
             found == H5I_GROUP     ? "group"
             : found == H5I_DATASET ? "dataset"
                                    : "named datatype",
             ", expected a ", kind == H5I_GROUP ? "group" : "dataset", "; ", missing_fix));
  return object;
}

namespace {

bool is_prime(std::uint64_t n) {
  if (n < 2) return false;
  for (std::uint64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

}  // namespace

// Slots for every chunk when that is cheap (no hash collisions), else 100 per chunk the cache
// holds (HDF5's advice), at most 2^20, prime.
H5Id chunk_cache_access(const DatasetStorage& storage, std::size_t element_bytes, std::size_t bytes) {
  H5Id dapl(DRT_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS), "H5Pcreate"));
  if (storage.chunk.empty()) return dapl;  // contiguous: no chunk cache
  std::uint64_t chunk_bytes = element_bytes, chunks = 1;
  for (std::size_t d = 0; d < storage.chunk.size(); ++d) {
    const auto c = static_cast<std::uint64_t>(std::max<std::int64_t>(1, storage.chunk[d]));
    chunk_bytes *= c;
    chunks *= (static_cast<std::uint64_t>(storage.shape[d]) + c - 1) / c;
  }
  const std::uint64_t fit = std::max<std::uint64_t>(1, bytes / std::max<std::uint64_t>(1, chunk_bytes));
  std::uint64_t slots = std::min({chunks, 100 * fit, std::uint64_t{1} << 20});
  slots = std::max<std::uint64_t>(slots, 2);
  while (!is_prime(slots)) ++slots;
  DRT_H5_CHECK(H5Pset_chunk_cache(dapl, static_cast<std::size_t>(slots), bytes, 0.75), "H5Pset_chunk_cache");
  return dapl;
}

namespace {

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  std::string item;
  for (char c : text + ",") {
    if (c == ',') {
      names.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  return names;
}

// mean or std of a split: float [C], finite (std positive).
std::vector<float> read_channel_stat(const std::string& file, const std::string& path, hid_t group,
                                     const std::string& name, int channels) {
  open_object(file, path, group, name, H5I_DATASET, "mean and std are float32 datasets [C]");
  const std::string full = path + "/" + name;
  H5Id dataset(DRT_H5_CHECK(H5Dopen2(group, name.c_str(), H5P_DEFAULT), "opening " + full));
  H5Id type(DRT_H5_CHECK(H5Dget_type(dataset), "H5Dget_type"));
  const std::vector<std::int64_t> dims = dims_of(dataset);
  if (H5Tget_class(type) != H5T_FLOAT)
    fail(file, full, str("element type ", type_name(type), "; per-channel statistics are float32 [C]"));
  if (dims.size() != 1 || dims[0] != channels)
    fail(file, full,
         str("shape ", shape_text(dims), "; expected [C] = [", channels,
             "], one value per channel of the images (or drop both mean and std)"));
  std::vector<float> values(static_cast<std::size_t>(channels));
  if (H5Dread(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    fail(file, full, str("cannot read: ", io::hdf5_error_stack()));
  for (std::size_t c = 0; c < values.size(); ++c) {
    const bool bad = !std::isfinite(values[c]) || (name == "std" && values[c] <= 0.0f);
    if (bad)
      fail(file, full,
           str("channel ", c, " is ", values[c],
               name == "std" ? "; a standard deviation must be positive and finite" : "; a mean must be finite"));
  }
  return values;
}

}  // namespace

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

void fail(const std::string& file, const std::string& object, const std::string& problem) {
  throw ConfigError(object.empty() ? str(file, ": ", problem) : str(file, ": ", object, ": ", problem));
}

void fail_label(const SplitHeader& header, std::int64_t sample, std::int64_t label) {
  fail_label(header, sample, std::to_string(label));
}

void fail_label(const SplitHeader& header, std::int64_t sample, const std::string& label) {
  fail(header.file, "/" + header.split + "/labels",
       str("sample ", sample, " has label ", label, ", outside [0, ", header.classes,
           ") (root attribute classes = ", header.classes, "); fix the label or the attribute"));
}

std::string type_name(hid_t type) {
  const H5T_class_t kind = H5Tget_class(type);
  const std::size_t bits = H5Tget_size(type) * 8;
  std::string name;
  switch (kind) {
    case H5T_INTEGER: name = str(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", bits); break;
    case H5T_FLOAT: name = str("float", bits); break;
    case H5T_STRING: name = "a string"; break;
    case H5T_COMPOUND: name = "a compound type"; break;
    case H5T_ENUM: name = "an enum (h5py's bool)"; break;
    case H5T_BITFIELD: name = "a bitfield"; break;
    case H5T_OPAQUE: name = "opaque"; break;
    case H5T_REFERENCE: name = "a reference"; break;
    case H5T_VLEN: name = "variable-length"; break;
    case H5T_ARRAY: name = "an array type"; break;
    default: name = "an unknown type"; break;
  }
  if ((kind == H5T_INTEGER || kind == H5T_FLOAT) && bits > 8 && H5Tget_order(type) == H5T_ORDER_BE)
    name += " (big-endian)";
  return name;
}

std::string read_text_attribute(const std::string& file, const std::string& object, hid_t holder,
                                const std::string& name) {
  H5Id attr(DRT_H5_CHECK(H5Aopen(holder, name.c_str(), H5P_DEFAULT), "opening attribute " + name));
  H5Id type(DRT_H5_CHECK(H5Aget_type(attr), "H5Aget_type"));
  H5Id space(DRT_H5_CHECK(H5Aget_space(attr), "H5Aget_space"));
  if (H5Tget_class(type) != H5T_STRING || H5Sget_simple_extent_npoints(space) != 1)
    fail(file, object, str("attribute '", name, "' is ", type_name(type), ", expected a string"));
  std::string value;
  if (H5Tis_variable_str(type) > 0) {
    H5Id memory(DRT_H5_CHECK(H5Tcopy(H5T_C_S1), "H5Tcopy"));
    DRT_H5_CHECK(H5Tset_size(memory, H5T_VARIABLE), "H5Tset_size");
    DRT_H5_CHECK(H5Tset_cset(memory, H5Tget_cset(type)), "H5Tset_cset");
    char* text = nullptr;
    if (H5Aread(attr, memory, static_cast<void*>(&text)) < 0)
      fail(file, object, str("cannot read attribute '", name, "': ", io::hdf5_error_stack()));
    value = text ? text : "";
    H5free_memory(text);
  } else {
    const std::size_t size = H5Tget_size(type);
    if (size == 0 || size > (std::size_t{1} << 20))
      fail(file, object, str("attribute '", name, "' is a string of ", size, " bytes"));
    std::vector<char> buffer(size, '\0');
    if (H5Aread(attr, type, buffer.data()) < 0)
      fail(file, object, str("cannot read attribute '", name, "': ", io::hdf5_error_stack()));
    value.assign(buffer.begin(), std::find(buffer.begin(), buffer.end(), '\0'));
    while (!value.empty() && value.back() == ' ') value.pop_back();  // space-padded strings
  }
  return value;
}

namespace {

// The file at `path` opened as HDF5, or a ConfigError saying why it cannot be (missing, a
// directory, no HDF5 signature, damaged).
H5Id open_hdf5_file(const std::string& path) {
  io::quiet_hdf5_errors();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail(path, "",
         str("cannot open: ", errno_text(err),
             err == ENOENT ? "; make a data set with drtrain-data convert (docs/DATA_FORMAT.md)" : ""));
  }
  struct stat info {};
  const int rc = ::fstat(fd, &info);
  ::close(fd);
  if (rc == 0 && S_ISDIR(info.st_mode))
    fail(path, "", "is a directory; expected an HDF5 data-set file (docs/DATA_FORMAT.md)");
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    H5Eclear2(H5E_DEFAULT);
    fail(path, "",
         "not an HDF5 file (no HDF5 signature); drtrain reads data sets in its HDF5 format (docs/DATA_FORMAT.md): "
         "convert IDX, .npy, text or token .bin files with drtrain-data convert");
  }
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0)
    fail(path, "",
         str("cannot open as HDF5: ", io::hdf5_error_stack(),
             "; the file is damaged or cut short (an interrupted copy?): copy or convert it again"));
  return H5Id(id);
}

// A token set's root attributes (vocab_size, source) into `file`, checked.
void read_token_attributes(DataFile& file, const std::optional<std::int64_t>& vocab, const std::string& vocab_fix,
                           const std::string& stream, bool has_classes) {
  const std::string& path = file.path;
  if (!vocab)
    fail(path, "/", str("attribute 'vocab_size' is missing: ", stream, " is a token stream and needs it: ", vocab_fix));
  if (has_classes)
    fail(path, "/",
         "has both 'classes' (an image data set) and 'vocab_size' (a token data set); a file holds one kind: drop "
         "the attribute that does not apply");
  if (*vocab < 1 || *vocab > kMaxVocabulary)
    fail(path, "/",
         str("attribute 'vocab_size' is ", *vocab, "; it must be in 1..", kMaxVocabulary,
             " (token ids reach the model as float32, exact below 2^24): ", vocab_fix));
  file.vocab_size = *vocab;
  file.tokens = true;
  if (H5Aexists(file.file, "source") > 0) file.source = read_text_attribute(path, "/", file.file, "source");
}

// An image set's root attributes (classes, class_names, source) into `file`, checked.
void read_image_attributes(DataFile& file, const std::optional<std::int64_t>& classes, const std::string& classes_fix) {
  const std::string& path = file.path;
  if (!classes) fail(path, "/", str("attribute 'classes' is missing: ", classes_fix));
  if (*classes < 1 || *classes > 2147483647)
    fail(path, "/", str("attribute 'classes' is ", *classes, "; it must be in 1..2147483647: ", classes_fix));
  file.classes = *classes;
  if (H5Aexists(file.file, "class_names") > 0) {
    file.class_names = read_text_attribute(path, "/", file.file, "class_names");
    const std::size_t names = split_names(file.class_names).size();
    if (static_cast<std::int64_t>(names) != file.classes)
      fail(path, "/",
           str("attribute 'class_names' lists ", names, " name(s) but classes = ", file.classes,
               "; give one comma-separated name per class, or drop the attribute"));
  }
  if (H5Aexists(file.file, "source") > 0) file.source = read_text_attribute(path, "/", file.file, "source");
}

}  // namespace

DataFile open_data_file(const std::string& path) {
  DataFile file;
  file.path = path;
  file.file = open_hdf5_file(path);

  const std::string fix =
      "write the file with drtrain-data convert, or set the root attributes drtrain_dataset = 1 and classes = K "
      "(h5py: f.attrs['drtrain_dataset'] = 1; docs/DATA_FORMAT.md)";
  const auto version = read_int_attribute(path, "/", file.file, "drtrain_dataset", fix);
  if (!version) fail(path, "/", str("attribute 'drtrain_dataset' is missing: not a drtrain data set; ", fix));
  if (*version != kDataFormatVersion)
    fail(path, "/",
         str("format version ", *version, " (attribute 'drtrain_dataset'); this drtrain reads version ",
             kDataFormatVersion, *version > kDataFormatVersion ? ": use a newer drtrain" : ": set it to 1"));
  const std::string classes_fix =
      "set it to the number of classes K, labels lie in [0, K) (h5py: f.attrs['classes'] = 10)";
  const auto classes = read_int_attribute(path, "/", file.file, "classes", classes_fix);

  // A token set: the root attribute vocab_size, or a split holding a token stream.
  const std::string vocab_fix =
      str("set it to the vocabulary size V, every token id lies in [0, V), at most 2^24 = ", kMaxVocabulary,
          " (h5py: f.attrs['vocab_size'] = 50257; docs/DATA_FORMAT.md, \"Token streams\")");
  const auto vocab = read_int_attribute(path, "/", file.file, "vocab_size", vocab_fix);
  std::string stream;  // "/train/tokens" when a split holds one
  for (const char* split : {"train", "test"}) {
    const htri_t group = H5Lexists(file.file, split, H5P_DEFAULT);
    const htri_t tokens = group > 0 ? H5Lexists(file.file, str(split, "/tokens").c_str(), H5P_DEFAULT) : 0;
    if (group < 0 || tokens < 0) H5Eclear2(H5E_DEFAULT);
    if (tokens > 0 && stream.empty()) stream = str("/", split, "/tokens");
  }
  if (vocab || !stream.empty()) read_token_attributes(file, vocab, vocab_fix, stream, classes.has_value());
  else read_image_attributes(file, classes, classes_fix);
  return file;
}

bool has_split(const DataFile& file, const std::string& split) {
  const htri_t exists = H5Lexists(file.file, split.c_str(), H5P_DEFAULT);
  if (exists < 0) H5Eclear2(H5E_DEFAULT);
  return exists > 0;
}

void Split::close() noexcept {
  images.reset();
  labels.reset();
  file.file.reset();
}

namespace {

// Split::images and its header fields: rank 4, uint8 or float32, a layout, a sensible shape,
// filters this HDF5 has; a ConfigError naming the problem and the fix otherwise.
void open_images(Split& s, hid_t group, const std::string& split, std::size_t cache_bytes) {
  const std::string& path = s.header.file;
  const std::string images_path = "/" + split + "/images";
  H5Id probe(DRT_H5_CHECK(H5Dopen2(group, "images", H5P_DEFAULT), "opening " + images_path));
  std::string missing;
  s.header.images = describe_storage(probe, &missing);
  H5Id type(DRT_H5_CHECK(H5Dget_type(probe), "H5Dget_type"));
  const std::vector<std::int64_t>& dims = s.header.images.shape;
  if (dims.size() != 4)
    fail(path, images_path,
         str("rank ", dims.size(), " ", shape_text(dims),
             "; expected rank 4, [N, C, H, W] or [N, H, W, C] (one-channel images [N, H, W] need an axis of 1: "
             "numpy x[:, None])"));
  const H5T_class_t kind = H5Tget_class(type);
  if (kind == H5T_INTEGER && H5Tget_size(type) == 1 && H5Tget_sign(type) == H5T_SGN_NONE)
    s.header.pixel_type = PixelType::kUint8;
  else if (kind == H5T_FLOAT && H5Tget_size(type) == 4) s.header.pixel_type = PixelType::kFloat32;
  else
    fail(path, images_path,
         str("element type ", type_name(type),
             "; images must be uint8 (pixels 0..255) or float32: convert them (numpy: x.astype('float32'))"));
  const std::string layout_fix =
      "set it to NCHW or NHWC, the order of the axes (h5py: f['" + split + "/images'].attrs['layout'] = 'NCHW')";
  if (H5Aexists(probe, "layout") <= 0) fail(path, images_path, str("attribute 'layout' is missing: ", layout_fix));
  const std::string layout = read_text_attribute(path, images_path, probe, "layout");
  if (layout != "NCHW" && layout != "NHWC")
    fail(path, images_path, str("attribute 'layout' is '", layout, "'; expected NCHW or NHWC: ", layout_fix));
  s.header.layout = layout == "NCHW" ? Layout::kNCHW : Layout::kNHWC;
  const bool nchw = s.header.layout == Layout::kNCHW;
  const std::int64_t c = nchw ? dims[1] : dims[3], h = nchw ? dims[2] : dims[1], w = nchw ? dims[3] : dims[2];
  if (dims[0] < 1) fail(path, images_path, str("shape ", shape_text(dims), " holds no samples"));
  if (c < 1 || h < 1 || w < 1)
    fail(path, images_path, str("shape ", shape_text(dims), " (", layout, ") has an empty axis"));
  if (c > kMaxSide || h > kMaxSide || w > kMaxSide || c * h * w > kMaxSampleValues)
    fail(path, images_path,
         str("samples of ", c, "x", h, "x", w, " (CxHxW, layout ", layout, ") are too large: at most ", kMaxSide,
             " a side and ", kMaxSampleValues, " values a sample; is the layout right?"));
  if (!missing.empty())
    fail(path, images_path,
         str("is stored with the filter ", missing,
             ", which this HDF5 library lacks; store it uncompressed or with gzip (h5py: compression='gzip')"));
  s.header.count = dims[0];
  s.header.channels = static_cast<int>(c);
  s.header.height = static_cast<int>(h);
  s.header.width = static_cast<int>(w);
  // The probe must be closed first: HDF5 shares an open dataset's chunk cache with later opens.
  probe.reset();
  H5Id dapl = chunk_cache_access(s.header.images, pixel_bytes(s.header.pixel_type), cache_bytes);
  s.images = H5Id(DRT_H5_CHECK(H5Dopen2(group, "images", dapl), "opening " + images_path));
}

// Split::labels: rank 1, integers, one per sample (after open_images()).
void open_labels(Split& s, hid_t group, const std::string& split, std::size_t cache_bytes) {
  const std::string& path = s.header.file;
  const std::string images_path = "/" + split + "/images", labels_path = "/" + split + "/labels";
  H5Id probe(DRT_H5_CHECK(H5Dopen2(group, "labels", H5P_DEFAULT), "opening " + labels_path));
  std::string missing;
  s.header.labels = describe_storage(probe, &missing);
  H5Id type(DRT_H5_CHECK(H5Dget_type(probe), "H5Dget_type"));
  const std::vector<std::int64_t>& dims = s.header.labels.shape;
  if (dims.size() != 1)
    fail(path, labels_path,
         str("rank ", dims.size(), " ", shape_text(dims), "; expected rank 1, [N] (numpy: y.reshape(-1))"));
  if (H5Tget_class(type) != H5T_INTEGER)
    fail(path, labels_path,
         str("element type ", type_name(type), "; labels must be integers (numpy: y.astype('int64'))"));
  if (dims[0] != s.header.count)
    fail(path, labels_path,
         str("holds ", dims[0], " labels but ", images_path, " holds ", s.header.count,
             " samples; there must be one label per sample"));
  if (!missing.empty())
    fail(path, labels_path,
         str("is stored with the filter ", missing,
             ", which this HDF5 library lacks; store it uncompressed or with gzip (h5py: compression='gzip')"));
  H5Id type_native(DRT_H5_CHECK(H5Tget_native_type(type, H5T_DIR_ASCEND), "H5Tget_native_type"));
  const std::size_t cache = std::max<std::size_t>(std::size_t{1} << 20, cache_bytes / 8);
  probe.reset();
  H5Id dapl = chunk_cache_access(s.header.labels, H5Tget_size(type_native), cache);
  s.labels = H5Id(DRT_H5_CHECK(H5Dopen2(group, "labels", dapl), "opening " + labels_path));
}

// The split's optional per-channel statistics (mean, std): both or neither (after open_images()).
void read_split_stats(Split& s, hid_t group, const std::string& g) {
  const std::string& path = s.header.file;
  const bool has_mean = H5Lexists(group, "mean", H5P_DEFAULT) > 0, has_std = H5Lexists(group, "std", H5P_DEFAULT) > 0;
  if (has_mean != has_std)
    fail(path, g,
         str("has '", has_mean ? "mean" : "std", "' but no '", has_mean ? "std" : "mean",
             "'; store both (float32 [C]) or neither"));
  if (has_mean) {
    s.header.mean = read_channel_stat(path, g, group, "mean", s.header.channels);
    s.header.stddev = read_channel_stat(path, g, group, "std", s.header.channels);
    H5Id mean(DRT_H5_CHECK(H5Dopen2(group, "mean", H5P_DEFAULT), "opening mean"));
    if (H5Aexists(mean, "computed_from") > 0)
      s.header.stats_from = read_text_attribute(path, g + "/mean", mean, "computed_from");
  }
}

}  // namespace

Split open_split(DataFile file, const std::string& split, std::size_t cache_bytes) {
  const std::string& path = file.path;
  if (split != "train" && split != "test")
    throw ConfigError(str(path, ": no split '", split, "': a data set's splits are train and test"));
  const std::string g = "/" + split;
  if (file.tokens)
    fail(path, "",
         str("is a token data set (root attribute vocab_size = ", file.vocab_size,
             "), not images: read its windows of tokens with open_token_source (drtrain --context T; "
             "docs/DATA_FORMAT.md, \"Token streams\")"));
  if (!has_split(file, split)) {
    std::vector<std::string> present;
    for (const char* name : {"train", "test"})
      if (has_split(file, name)) present.push_back(str("/", name));
    fail(path, "",
         str("has no group '", g, "' (", present.empty() ? "nor any other split" : "it holds " + join(present, " and "),
             "); each split is a group at the root holding images and labels (docs/DATA_FORMAT.md)"));
  }
  H5Id group = open_object(path, "", file.file, split, H5I_GROUP,
                           "each split is a group holding images and labels (docs/DATA_FORMAT.md)");
  const std::string split_fix =
      "a split holds images [N, C, H, W] or [N, H, W, C] (uint8 or float32, attribute layout) and labels [N] "
      "(docs/DATA_FORMAT.md)";
  open_object(path, g, group, "images", H5I_DATASET, split_fix);
  open_object(path, g, group, "labels", H5I_DATASET, split_fix);

  Split s;
  s.header.file = path;
  s.header.split = split;
  s.header.classes = file.classes;
  s.header.class_names = file.class_names;
  s.header.source = file.source;
  open_images(s, group, split, cache_bytes);
  open_labels(s, group, split, cache_bytes);
  read_split_stats(s, group, g);
  s.file = std::move(file);
  return s;
}

}  // namespace drt::data::h5
