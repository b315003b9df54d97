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
constexpr const char* kOptimizer = "/optimizer";
constexpr const char* kChecksumAlgorithm = "sum mod 2^64 of splitmix64 element hashes, v1";

std::string params_path(const std::string& tensor);
std::string slot_path(const std::string& slot, const std::string& tensor);
// Every dataset, in file order: the parameters' tensors, then each slot's, in model order.
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

// The part of each dataset that falls in the shard [shard.begin, shard.end): calls
// visit(array, dataset, tensor, lo, hi) for elements [lo, hi) of the tensor (relative to the
// tensor), where array 0 is the parameters and k >= 1 optimizer slot k - 1, in file order.
template <typename Visit>
void for_each_part(const ParamLayout& layout, const std::vector<std::string>& slot_names, std::size_t begin,
                   std::size_t end, Visit visit) {
  for (std::size_t k = 0; k <= slot_names.size(); ++k)
    for (const TensorSpec& t : layout.tensors()) {
      const std::size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
      if (hi <= lo) continue;
      visit(k, k == 0 ? params_path(t.name) : slot_path(slot_names[k - 1], t.name), t, lo - t.offset, hi - t.offset);
    }
}

}  // namespace drt::io::schema
