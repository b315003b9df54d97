#include "drtrain/io/checkpoint.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <sstream>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/core/test_faults.hpp"
#include "checkpoint_schema.hpp"
#include "hdf5.hpp"

namespace drt::io {
namespace {

// Names of the groups under /optimizer, sorted.
std::vector<std::string> list_slots(hid_t file) {
  if (H5Lexists(file, schema::kOptimizer, H5P_DEFAULT) <= 0) return {};
  H5Id group(DRT_H5_CHECK(H5Gopen2(file, schema::kOptimizer, H5P_DEFAULT), "opening /optimizer"));
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
// A definition's lines without its first "model NAME" line (the name is the words of --model).
std::vector<std::string> definition_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!(lines.empty() && line.rfind("model ", 0) == 0)) lines.push_back(line);
  return lines;
}

// The checkpoint's model is this run's: by definition where the file stores one.
void check_same_model(const CheckpointMeta& m, const ResumeMatch& match) {
  const std::string fix = ": pass the checkpoint's model (or restore the file), or start without --resume (or with "
                          "another --checkpoint-dir)";
  if (m.model_definition.empty() || match.model_definition.empty()) {
    if (m.model != match.model)
      throw ConfigError(str("the checkpoint holds --model ", m.model, ", this run has --model ", match.model, fix));
    return;
  }
  const std::vector<std::string> ours = definition_lines(match.model_definition);
  const std::vector<std::string> theirs = definition_lines(m.model_definition);
  if (ours == theirs) return;
  std::size_t i = 0;
  while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
  const auto line = [i](const std::vector<std::string>& lines) {
    return i < lines.size() ? "'" + lines[i] + "'" : std::string("nothing (it ends before)");
  };
  throw ConfigError(str("--model ", match.model, " differs from the checkpoint's model (--model ", m.model,
                        "): node line ", i + 1, " of the definition is ", line(ours), " here and ", line(theirs),
                        " in the checkpoint (h5dump -a model_definition FILE shows its definition)", fix));
}

// The checkpoint's run trained on the same data (where the file says which).
void check_same_data(const CheckpointMeta& m, const ResumeMatch& match) {
  if (m.data_identity.empty() || match.data_identity.empty() || m.data_identity == match.data_identity) return;
  const std::vector<std::string> ours = split_exact(match.data_identity, "; "),
                                 theirs = split_exact(m.data_identity, "; ");
  std::vector<std::string> differ;
  for (std::size_t i = 0; i < std::max(ours.size(), theirs.size()); ++i) {
    const std::string a = i < ours.size() ? ours[i] : "-", b = i < theirs.size() ? theirs[i] : "-";
    if (a != b) differ.push_back(str(a, " here, ", b, " in the checkpoint's run"));
  }
  throw ConfigError(str("the training data differs from the checkpoint's run: ", join(differ, "; "),
                        ": pass the data set the run trained on (--dataset, --data-file, --context), or start "
                        "without --resume (or with another --checkpoint-dir)"));
}

void check_fits(hid_t file, const CheckpointMeta& m, const ResumeMatch& match, const ParamLayout& layout,
                const std::vector<std::string>& slot_names) {
  check_same_model(m, match);
  check_same_data(m, match);
  const std::string& model = match.model;
  const std::vector<std::string> slots = list_slots(file);  // by name
  std::vector<std::string> wanted = slot_names;
  std::sort(wanted.begin(), wanted.end());
  if (slots != wanted)
    throw ConfigError(str("the checkpoint holds optimizer state [", join(slots, ", "), "] (", m.optimizer_config,
                          "); this run's optimizer needs [", join(slot_names, ", "),
                          "]: pass the optimizer "
                          "options of the checkpoint's run, or start without --resume"));
  for (const schema::Dataset& ds : schema::datasets(layout, slot_names)) {
    const TensorSpec& t = *ds.tensor;
    const std::string& path = ds.path;
    const std::string group = path.substr(0, path.rfind('/'));
    if (H5Lexists(file, group.c_str(), H5P_DEFAULT) <= 0 || H5Lexists(file, path.c_str(), H5P_DEFAULT) <= 0)
      throw ConfigError(str("the checkpoint has no dataset ", path, " (tensor ", t.name, " of --model ", model,
                            "): the file holds another model, or is damaged; pass the checkpoint's --model (", m.model,
                            "), or start without --resume"));
    const std::vector<std::int64_t> shape = dataset_shape(file, path);
    if (shape != t.shape)
      throw ConfigError(str("tensor ", path, " has shape ", schema::shape_text(shape), " in the checkpoint and ",
                            schema::shape_text(t.shape), " in --model ", model,
                            ": the models differ; pass the "
                            "checkpoint's --model, or start without --resume"));
  }
}

// Reads the part of every dataset that falls in the shard; returns its checksum term.
template <typename Read>
std::uint64_t read_parts(const ParamLayout& layout, const std::vector<std::string>& slot_names, const ShardView& shard,
                         Read read) {
  std::uint64_t sum = 0;
  schema::for_each_part(layout, slot_names, shard.spans,
                        [&](std::size_t, const schema::Dataset& ds, std::size_t lo, std::size_t hi, std::size_t local) {
                          const TensorSpec& t = *ds.tensor;
                          float* data = (ds.array == 0 ? shard.params : shard.slots[ds.array - 1]) + local;
                          read(ds.path, t, lo, hi, data);
                          sum += checksum_part(ds.path, lo, data, hi - lo);
                        });
  return sum;
}

H5Id open_parallel(const comm::Comm& ps, const std::string& path) {
  H5Id fapl(DRT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"));
  DRT_H5_CHECK(H5Pset_fapl_mpio(fapl, ps.get(), MPI_INFO_NULL), "H5Pset_fapl_mpio");
  return H5Id(DRT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "opening " + path));
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
  select_flat_range(r.file_space, schema::dims(t.shape), lo, hi);
  const hsize_t n = hi - lo;
  r.memory = H5Id(DRT_H5_CHECK(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
  return r;
}

}  // namespace

CheckpointMeta read_checkpoint(const comm::Comm& ps, const std::string& path, const ResumeMatch& match,
                               const ParamLayout& layout, const std::vector<std::string>& slot_names,
                               const ShardView& shard) {
  quiet_hdf5_errors();
  // 1. PS 0 alone opens the file serially and checks that it is whole and fits this run.
  std::exception_ptr error;
  if (ps.rank() == 0) {
    try {
      CheckpointFile check(path);
      H5Id file(DRT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening " + path));
      check_fits(file, check.meta(), match, layout, slot_names);
    } catch (...) {
      error = std::current_exception();
    }
  }
  schema::agree(ps, error);
  // Test-only (core/test_faults.hpp): the first file checked goes away before the parallel open.
  static bool vanished = false;
  if (ps.rank() == 0 && !vanished && test_fault("resume-vanish")) {
    vanished = true;
    if (std::rename(path.c_str(), (path + ".vanished").c_str()) != 0)
      throw Error(str("resume-vanish: cannot move ", path, " away"));
  }
  // 2. Every PS reads its parts; 3. the checksum over all parts must match. A file removed or
  // replaced since the check is one --resume skips (a CheckpointError), like a corrupt one.
  CheckpointMeta meta;
  std::uint64_t part = 0;
  std::optional<H5Id> opened;
  try {
    opened.emplace(open_parallel(ps, path));
  } catch (const std::exception& e) {
    error = std::make_exception_ptr(CheckpointError(
        str("it could not be opened on every PS after it was checked (removed or replaced meanwhile?): ", e.what())));
  }
  schema::agree(ps, error);
  {
    H5Id file = std::move(*opened);
    try {
      meta = schema::read_meta(file);
      const H5Id dxpl = independent_transfer();
      part = read_parts(layout, slot_names, shard,
                        [&](const std::string& p, const TensorSpec& t, std::size_t lo, std::size_t hi, float* data) {
                          const FlatRange r = open_flat_range(file, p, t, lo, hi);
                          if (H5Dread(r.dataset, H5T_NATIVE_FLOAT, r.memory, r.file_space, dxpl, data) < 0)
                            throw CheckpointError(str("reading ", p, ": ", hdf5_error_stack()));
                        });
    } catch (...) {
      error = std::current_exception();
    }
  }  // the collective close happens on every PS, error or not
  schema::agree(ps, error);
  if (sum_over(ps, part) != meta.checksum)
    throw CheckpointError("the content checksum does not match the data: the file is corrupt");
  return meta;
}

CheckpointFile::CheckpointFile(const std::string& path) : path_(path) {
  quiet_hdf5_errors();
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw CheckpointError(str("not a readable HDF5 file: ", hdf5_error_stack()));
  try {
    meta_ = schema::read_meta(file);
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
    for (const auto& n : link_names(g)) out.push_back(str(group, "/", n));
  };
  list(schema::kParams);
  if (H5Lexists(static_cast<hid_t>(file_), schema::kState, H5P_DEFAULT) > 0) list(schema::kState);
  for (const auto& slot : slot_names()) list(std::string(schema::kOptimizer) + "/" + slot);
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
      throw CheckpointError(str(dataset, ": implausible size ", schema::shape_text(t.shape)));
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
    throw CheckpointError(str("the content checksum does not match the data (stored ", meta_.checksum, ", computed ",
                              sum, "): the file is corrupt"));
}

}  // namespace drt::io
