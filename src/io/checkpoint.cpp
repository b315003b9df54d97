#include "drtrain/io/checkpoint.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <exception>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/progress.hpp"
#include "drtrain/core/strings.hpp"
#include "hdf5.hpp"

namespace drt::io {
namespace {

constexpr const char* kParams = "/params";
constexpr const char* kOptimizer = "/optimizer";
constexpr std::size_t kWritePiece = std::size_t{1} << 18;  // elements (1 MiB) per H5Dwrite

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

std::string params_path(const std::string& tensor) { return std::string(kParams) + "/" + tensor; }
std::string slot_path(const std::string& slot, const std::string& tensor) {
  return std::string(kOptimizer) + "/" + slot + "/" + tensor;
}

std::vector<hsize_t> dims(const std::vector<std::int64_t>& shape) {
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> parts;
  for (auto d : shape) parts.push_back(std::to_string(d));
  return "[" + join(parts, ", ") + "]";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Collective: when any rank failed, every rank throws the lowest failing rank's error, with
// the same type (ConfigError, CheckpointError or Error).
void agree(const comm::Comm& comm, const std::exception_ptr& local) {
  int kind = 0;
  std::string message;
  if (local) {
    try {
      std::rethrow_exception(local);
    } catch (const ConfigError& e) {
      kind = 1, message = e.what();
    } catch (const CheckpointError& e) {
      kind = 2, message = e.what();
    } catch (const std::exception& e) {
      kind = 3, message = e.what();
    }
  }
  int first = kind ? comm.rank() : comm.size();
  DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm.get()));
  if (first == comm.size()) return;
  int header[2] = {kind, static_cast<int>(message.size())};
  DRT_MPI_CHECK(MPI_Bcast(header, 2, MPI_INT, first, comm.get()));
  message.resize(static_cast<std::size_t>(header[1]));
  DRT_MPI_CHECK(MPI_Bcast(message.data(), header[1], MPI_CHAR, first, comm.get()));
  if (header[0] == 1) throw ConfigError(message);
  if (header[0] == 2) throw CheckpointError(message);
  throw Error(message);
}

void write_meta(hid_t file, const CheckpointMeta& m) {
  write_attribute(file, "format_version", m.format_version);
  write_attribute(file, "drtrain_version", m.drtrain_version);
  write_attribute(file, "step", m.step);
  write_attribute(file, "epoch", m.epoch);
  write_attribute(file, "step_in_epoch", m.step_in_epoch);
  write_attribute(file, "samples_seen", m.samples_seen);
  write_attribute(file, "global_batch", m.global_batch);
  write_attribute(file, "model", m.model);
  write_attribute(file, "optimizer", m.optimizer);
  write_attribute(file, "optimizer_config", m.optimizer_config);
  write_attribute(file, "num_ps", m.num_ps);
  write_attribute(file, "num_workers", m.num_workers);
  write_attribute(file, "towers", m.towers);
  write_attribute(file, "shard_boundaries", m.shard_boundaries);
  write_attribute(file, "seed", m.seed);
  write_attribute(file, "config", m.config);
  write_attribute(file, "created", m.created);
  write_attribute(file, "checksum", m.checksum);
  write_attribute(file, "checksum_algorithm", std::string("sum mod 2^64 of splitmix64 element hashes, v1"));
  write_attribute(file, "complete", std::int64_t{1});  // last: a file without it is partial
}

CheckpointMeta read_meta(hid_t file) {
  CheckpointMeta m;
  m.format_version = read_int_attribute(file, "format_version");
  if (m.format_version > kCheckpointFormatVersion)
    throw ConfigError(str("checkpoint format version ", m.format_version, " was written by a newer drtrain; this one "
                          "reads versions up to ", kCheckpointFormatVersion, ": use a newer drtrain, or start "
                          "without --resume"));
  if (!has_attribute(file, "complete")) throw CheckpointError("the file is incomplete (no 'complete' attribute)");
  m.drtrain_version = read_string_attribute(file, "drtrain_version");
  m.step = read_int_attribute(file, "step");
  m.epoch = read_int_attribute(file, "epoch");
  m.step_in_epoch = read_int_attribute(file, "step_in_epoch");
  m.samples_seen = read_int_attribute(file, "samples_seen");
  m.global_batch = read_int_attribute(file, "global_batch");
  m.model = read_string_attribute(file, "model");
  m.optimizer = read_string_attribute(file, "optimizer");
  m.optimizer_config = read_string_attribute(file, "optimizer_config");
  m.num_ps = read_int_attribute(file, "num_ps");
  m.num_workers = read_int_attribute(file, "num_workers");
  m.towers = read_int_attribute(file, "towers");
  m.shard_boundaries = read_uint_array_attribute(file, "shard_boundaries");
  m.seed = read_uint_attribute(file, "seed");
  m.config = read_string_attribute(file, "config");
  m.created = read_string_attribute(file, "created");
  m.checksum = read_uint_attribute(file, "checksum");
  if (m.step < 0 || m.epoch < 0 || m.step_in_epoch < 0 || m.global_batch < 1)
    throw CheckpointError("the metadata holds impossible values (negative step or batch)");
  return m;
}

// Names of the groups under /optimizer, sorted.
std::vector<std::string> list_slots(hid_t file) {
  if (H5Lexists(file, kOptimizer, H5P_DEFAULT) <= 0) return {};
  H5Id group(DRT_H5_CHECK(H5Gopen2(file, kOptimizer, H5P_DEFAULT), "opening /optimizer"));
  std::vector<std::string> names = link_names(group);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::int64_t> dataset_shape(hid_t file, const std::string& path) {
  H5Id dset(DRT_H5_CHECK(H5Dopen2(file, path.c_str(), H5P_DEFAULT), "opening " + path));
  H5Id space(DRT_H5_CHECK(H5Dget_space(dset), "H5Dget_space " + path));
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0 || rank > 8) throw CheckpointError(str(path, ": bad dataspace"));
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space, d.data(), nullptr);
  return std::vector<std::int64_t>(d.begin(), d.end());
}

// Checks that the file holds exactly this model's tensors with these shapes, and these slots.
void check_fits(hid_t file, const CheckpointMeta& m, const std::string& model, const ParamLayout& layout,
                const std::vector<std::string>& slot_names) {
  if (m.model != model)
    throw ConfigError(str("the checkpoint holds --model ", m.model, ", this run has --model ", model,
                          ": pass --model ", m.model, ", or start without --resume (or with another --checkpoint-dir)"));
  const std::vector<std::string> slots = list_slots(file);  // by name
  std::vector<std::string> wanted = slot_names;
  std::sort(wanted.begin(), wanted.end());
  if (slots != wanted)
    throw ConfigError(str("the checkpoint holds optimizer state [", join(slots, ", "), "] (", m.optimizer_config,
                          "); this run's optimizer needs [", join(slot_names, ", "), "]: pass the optimizer "
                          "options of the checkpoint's run, or start without --resume"));
  std::vector<std::string> groups{kParams};
  for (const auto& s : slot_names) groups.push_back(std::string(kOptimizer) + "/" + s);
  for (const std::string& group : groups)
    for (const TensorSpec& t : layout.tensors()) {
      const std::string path = group + "/" + t.name;
      if (H5Lexists(file, group.c_str(), H5P_DEFAULT) <= 0 || H5Lexists(file, path.c_str(), H5P_DEFAULT) <= 0)
        throw ConfigError(str("the checkpoint has no dataset ", path, " (tensor ", t.name, " of --model ", model,
                              "): the file is damaged or from another program; use another checkpoint"));
      const std::vector<std::int64_t> shape = dataset_shape(file, path);
      if (shape != t.shape)
        throw ConfigError(str("tensor ", path, " has shape ", shape_text(shape), " in the checkpoint and ",
                              shape_text(t.shape), " in --model ", model, ": the models differ; pass the "
                              "checkpoint's --model, or start without --resume"));
    }
}

// Reads or writes the part of every dataset that falls in the shard.
template <typename Transfer>
std::uint64_t for_each_part(const ParamLayout& layout, const std::vector<std::string>& slot_names,
                            const ShardView& shard, Transfer transfer) {
  std::uint64_t sum = 0;
  for (std::size_t k = 0; k <= slot_names.size(); ++k) {
    float* base = k == 0 ? shard.params : shard.slots[k - 1];
    for (const TensorSpec& t : layout.tensors()) {
      const std::size_t lo = std::max(shard.begin, t.offset), hi = std::min(shard.end, t.offset + t.numel);
      if (hi <= lo) continue;
      const std::string path = k == 0 ? params_path(t.name) : slot_path(slot_names[k - 1], t.name);
      float* data = base + (lo - shard.begin);
      transfer(path, t, lo - t.offset, hi - t.offset, data);
      sum += checksum_part(path, lo - t.offset, data, hi - lo);
    }
  }
  return sum;
}

H5Id open_parallel(const comm::Comm& ps, const std::string& path, bool create) {
  H5Id fapl(DRT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"));
  DRT_H5_CHECK(H5Pset_fapl_mpio(fapl, ps.get(), MPI_INFO_NULL), "H5Pset_fapl_mpio");
  const hid_t file = create ? H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl)
                            : H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  return H5Id(DRT_H5_CHECK(file, str(create ? "creating " : "opening ", path)));
}

H5Id independent_transfer() {
  H5Id dxpl(DRT_H5_CHECK(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate"));
  DRT_H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_INDEPENDENT), "H5Pset_dxpl_mpio");
  return dxpl;
}

std::uint64_t sum_over(const comm::Comm& ps, std::uint64_t part) {
  DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &part, 1, MPI_UINT64_T, MPI_SUM, ps.get()));
  return part;
}

// Elements [lo, hi) of dataset p (tensor t) in flat row-major order: the open dataset, its file
// space with that range selected, and a 1-D memory space of hi - lo floats.
struct FlatRange {
  H5Id dataset, file_space, memory;
};

FlatRange open_flat_range(hid_t file, const std::string& p, const TensorSpec& t, std::size_t lo, std::size_t hi) {
  FlatRange r;
  r.dataset = H5Id(DRT_H5_CHECK(H5Dopen2(file, p.c_str(), H5P_DEFAULT), "opening " + p));
  r.file_space = H5Id(DRT_H5_CHECK(H5Dget_space(r.dataset), "H5Dget_space"));
  select_flat_range(r.file_space, dims(t.shape), lo, hi);
  const hsize_t n = hi - lo;
  r.memory = H5Id(DRT_H5_CHECK(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
  return r;
}

}  // namespace

std::uint64_t checksum_part(const std::string& dataset, std::uint64_t first, const float* values, std::size_t count) {
  const std::uint64_t salt = fnv1a(dataset);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, values + i, sizeof bits);
    sum += splitmix64(salt ^ splitmix64(first + i) ^ (static_cast<std::uint64_t>(bits) * 0x9E3779B97F4A7C15ULL));
  }
  return sum;
}

void write_checkpoint(const comm::Comm& ps, const std::string& path, CheckpointMeta meta, const ParamLayout& layout,
                      const std::vector<std::string>& slot_names, const ShardView& shard,
                      const std::function<void()>& after_data) {
  quiet_hdf5_errors();
  // Every PS must write identical metadata: take the creation time of PS 0.
  char created[32] = {0};
  if (ps.rank() == 0) std::snprintf(created, sizeof created, "%s", utc_now().c_str());
  DRT_MPI_CHECK(MPI_Bcast(created, sizeof created, MPI_CHAR, 0, ps.get()));
  meta.created = created;
  H5Id file = open_parallel(ps, path, true);
  // Groups and datasets: metadata, created collectively by every PS. Groups track creation
  // order, so h5ls and drtrain-ckpt list tensors in model order.
  H5Id gcpl(DRT_H5_CHECK(H5Pcreate(H5P_GROUP_CREATE), "H5Pcreate"));
  DRT_H5_CHECK(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
               "H5Pset_link_creation_order");
  auto make_group = [&](const std::string& name) {
    H5Id(DRT_H5_CHECK(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT), "creating " + name));
  };
  make_group(kParams);
  make_group(kOptimizer);
  for (const auto& slot : slot_names) make_group(std::string(kOptimizer) + "/" + slot);
  for (std::size_t k = 0; k <= slot_names.size(); ++k)
    for (const TensorSpec& t : layout.tensors()) {
      const std::string p = k == 0 ? params_path(t.name) : slot_path(slot_names[k - 1], t.name);
      const std::vector<hsize_t> d = dims(t.shape);
      H5Id space(DRT_H5_CHECK(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), "H5Screate_simple"));
      H5Id(DRT_H5_CHECK(H5Dcreate2(file, p.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                        "creating " + p));
    }
  // Raw data: each PS its own hyperslabs, independently, in pieces of kWritePiece elements with
  // a turn of MPI progress after each (comm/progress.hpp): the workers keep pushing the next step
  // towards this PS while it writes, and on some RMA paths their flushes need this rank in MPI.
  const H5Id dxpl = independent_transfer();
  const std::uint64_t part = for_each_part(layout, slot_names, shard,
      [&](const std::string& p, const TensorSpec& t, std::size_t lo, std::size_t hi, float* data) {
        for (std::size_t a = lo; a < hi; a += kWritePiece) {
          const std::size_t b = std::min(hi, a + kWritePiece);
          const FlatRange r = open_flat_range(file, p, t, a, b);
          DRT_H5_CHECK(H5Dwrite(r.dataset, H5T_NATIVE_FLOAT, r.memory, r.file_space, dxpl, data + (a - lo)),
                       "writing " + p);
          comm::progress();
        }
      });
  if (after_data) after_data();
  meta.checksum = sum_over(ps, part);
  write_meta(file, meta);
  DRT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), "flushing " + path);
}

CheckpointMeta read_checkpoint(const comm::Comm& ps, const std::string& path, const std::string& model,
                               const ParamLayout& layout, const std::vector<std::string>& slot_names,
                               const ShardView& shard) {
  quiet_hdf5_errors();
  // 1. PS 0 alone opens the file serially and checks that it is whole and fits this run.
  std::exception_ptr error;
  if (ps.rank() == 0) {
    try {
      CheckpointFile check(path);
      H5Id file(DRT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening " + path));
      check_fits(file, check.meta(), model, layout, slot_names);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree(ps, error);
  // 2. Every PS reads its parts; 3. the checksum over all parts must match.
  CheckpointMeta meta;
  std::uint64_t part = 0;
  {
    H5Id file = open_parallel(ps, path, false);
    try {
      meta = read_meta(file);
      const H5Id dxpl = independent_transfer();
      part = for_each_part(layout, slot_names, shard,
          [&](const std::string& p, const TensorSpec& t, std::size_t lo, std::size_t hi, float* data) {
            const FlatRange r = open_flat_range(file, p, t, lo, hi);
            if (H5Dread(r.dataset, H5T_NATIVE_FLOAT, r.memory, r.file_space, dxpl, data) < 0)
              throw CheckpointError(str("reading ", p, ": ", hdf5_error_stack()));
          });
    } catch (...) {
      error = std::current_exception();
    }
  }  // the collective close happens on every PS, error or not
  agree(ps, error);
  if (sum_over(ps, part) != meta.checksum)
    throw CheckpointError("the content checksum does not match the data: the file is corrupt");
  return meta;
}

CheckpointFile::CheckpointFile(const std::string& path) : path_(path) {
  quiet_hdf5_errors();
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw CheckpointError(str("not a readable HDF5 file: ", hdf5_error_stack()));
  try {
    meta_ = read_meta(file);
  } catch (const ConfigError&) {
    H5Fclose(file);
    throw;
  } catch (const CheckpointError&) {
    H5Fclose(file);
    throw;
  } catch (const std::exception& e) {
    H5Fclose(file);
    throw CheckpointError(str("bad metadata: ", e.what()));
  }
  file_ = file;
}

CheckpointFile::~CheckpointFile() {
  if (file_ >= 0) H5Fclose(static_cast<hid_t>(file_));
}

std::vector<std::string> CheckpointFile::slot_names() const { return list_slots(static_cast<hid_t>(file_)); }

std::vector<std::string> CheckpointFile::datasets() const {
  std::vector<std::string> out;
  auto list = [&](const std::string& group) {
    H5Id g(DRT_H5_CHECK(H5Gopen2(static_cast<hid_t>(file_), group.c_str(), H5P_DEFAULT), "opening " + group));
    for (const auto& n : link_names(g)) out.push_back(group + "/" + n);
  };
  list(kParams);
  for (const auto& slot : slot_names()) list(std::string(kOptimizer) + "/" + slot);
  return out;
}

CheckpointFile::Tensor CheckpointFile::read(const std::string& dataset) const {
  Tensor t;
  t.path = dataset;
  t.shape = dataset_shape(static_cast<hid_t>(file_), dataset);
  // At most 2^34 elements; checked per dimension, so that a shape whose element count wraps
  // around 64 bits (HDF5 accepts it and wraps the same way) is refused too.
  constexpr std::size_t kMaxElements = std::size_t{1} << 34;
  std::size_t n = 1;
  for (auto d : t.shape) {
    if (d < 0 || (d > 0 && n > kMaxElements / static_cast<std::size_t>(d)))
      throw CheckpointError(str(dataset, ": implausible size ", shape_text(t.shape)));
    n *= static_cast<std::size_t>(d);
  }
  t.values.resize(n);
  H5Id dset(DRT_H5_CHECK(H5Dopen2(static_cast<hid_t>(file_), dataset.c_str(), H5P_DEFAULT), "opening " + dataset));
  if (H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.values.data()) < 0)
    throw CheckpointError(str("reading ", dataset, ": ", hdf5_error_stack()));
  return t;
}

void CheckpointFile::verify() const {
  std::uint64_t sum = 0;
  for (const std::string& d : datasets()) {
    const Tensor t = read(d);
    sum += checksum_part(d, 0, t.values.data(), t.values.size());
  }
  if (sum != meta_.checksum)
    throw CheckpointError(str("the content checksum does not match the data (stored ", meta_.checksum,
                              ", computed ", sum, "): the file is corrupt"));
}

}  // namespace drt::io
