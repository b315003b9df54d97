// What a checkpoint file holds and where (internal to io; format: docs/CHECKPOINT_FORMAT.md):
// dataset names, the root attributes, the part of every dataset that falls in a PS's shard,
// the content checksum's terms, and the agreement that turns one PS's failure into the same
// exception on every PS. Shared by the reader (checkpoint.cpp) and the writer
// (checkpoint_writer.cpp).
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "drtrain/comm/comm.hpp"
#include "drtrain/core/param_layout.hpp"
#include "drtrain/io/checkpoint.hpp"

namespace drt::io::schema {

constexpr const char* kParams = "/params";
constexpr const char* kState = "/state";
constexpr const char* kOptimizer = "/optimizer";
constexpr const char* kChecksumAlgorithm = "sum mod 2^64 of splitmix64 element hashes, v1";

std::string params_path(const std::string& tensor);
std::string state_path(const std::string& tensor);
std::string slot_path(const std::string& slot, const std::string& tensor);

// One dataset of the file: a tensor's values (array 0: /params, or /state for state tensors) or
// its optimizer slot array - 1 (/optimizer/<slot>; parameters only).
struct Dataset {
  std::string path;
  const TensorSpec* tensor;
  std::size_t array;
};
// Every dataset, in file order: the tensors (model order), then each slot's parameters.
std::vector<Dataset> datasets(const ParamLayout& layout, const std::vector<std::string>& slot_names);
std::vector<std::string> dataset_paths(const ParamLayout& layout, const std::vector<std::string>& slot_names);

std::vector<hsize_t> dims(const std::vector<std::int64_t>& shape);
std::string shape_text(const std::vector<std::int64_t>& shape);
std::string utc_now();

// Root attributes. write_meta writes all but the checksum and `complete`; write_completion
// writes those two (and the algorithm's name), `complete` last: a file without it is partial.
void write_meta(hid_t file, const CheckpointMeta& m);
void write_completion(hid_t file, std::uint64_t checksum);
CheckpointMeta read_meta(hid_t file);

// Collective: when any rank failed, every rank throws the lowest failing rank's error, with
// the same type (ConfigError, CheckpointError or Error).
void agree(const comm::Comm& comm, const std::exception_ptr& local);

// The part of each dataset that falls in a shard of the given spans: calls
// visit(index, dataset, lo, hi, local) for elements [lo, hi) of the dataset's tensor (relative
// to the tensor), `index` being the dataset's position in datasets(), in file order, and
// `local` the index of element lo in the shard's buffer. Datasets in file order, then spans.
template <typename Visit>
void for_each_part(const ParamLayout& layout, const std::vector<std::string>& slot_names,
                   const std::vector<ShardSpan>& spans, Visit visit) {
  const std::vector<Dataset> all = datasets(layout, slot_names);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const TensorSpec& t = *all[i].tensor;
    for (const ShardSpan& s : spans) {
      const std::size_t lo = std::max(s.begin, t.offset), hi = std::min(s.end, t.offset + t.numel);
      if (hi <= lo) continue;
      visit(i, all[i], lo - t.offset, hi - t.offset, s.local + (lo - s.begin));
    }
  }
}

}  // namespace drt::io::schema
