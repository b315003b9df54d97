// HDF5 checkpoints (format: docs/CHECKPOINT_FORMAT.md): what a checkpoint records, reading it
// (parallel, on resume; serially, for tools). Parameters and optimizer slots are stored as
// logical tensors by name with their real shapes, never as shards, so any layout can read them:
// each PS writes (io/checkpoint_writer.hpp) and on resume reads the part of every tensor that
// falls in its shard of the flat parameter space. No rank ever holds the whole model. A content
// checksum (order-independent, so the PS can compute it in parts and add them) makes bit rot
// and half-written files detectable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "drtrain/comm/comm.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/param_layout.hpp"

namespace drt::io {

constexpr std::int64_t kCheckpointFormatVersion = 1;

// A checkpoint file that is unreadable, incomplete or corrupt (as opposed to a good file that
// does not fit this run, which is a ConfigError). --resume skips such files with a warning.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// What a checkpoint records about the run that wrote it (root attributes).
struct CheckpointMeta {
  std::int64_t format_version = kCheckpointFormatVersion;
  std::string drtrain_version;
  std::int64_t step = 0;           // optimizer steps applied: the next step's global index
  std::int64_t epoch = 0;          // data cursor of the next step: its epoch (0-based) ...
  std::int64_t step_in_epoch = 0;  // ... and its step within that epoch
  std::int64_t samples_seen = 0;   // training samples consumed since the start of the job
  std::int64_t global_batch = 0;
  std::string model;             // --model
  std::string model_definition;  // the model graph in the model-file format (empty in older files)
  std::string data_identity;     // the training data (data_identity below; empty in older files)
  std::string optimizer;         // sgd | adam | adamw
  std::string optimizer_config;  // full description: lr, momentum, betas, decay, schedule
  std::int64_t num_ps = 0, num_workers = 0, towers = 0;
  std::vector<std::uint64_t> shard_boundaries;  // the writer's shard plan
  std::uint64_t seed = 0;                       // weights and data order (the only random state)
  std::string config;                           // the writer's resolved configuration (INI)
  // --sync-mode ssp/async (a cut, docs/CHECKPOINT_FORMAT.md "Resuming"): per worker, the step it
  // stopped before (epoch and step_in_epoch are the slowest worker's); the worker gradients
  // applied to every element in all runs. Empty / -1 in other checkpoints (every worker at the
  // data cursor; step x num_workers gradients).
  std::vector<std::uint64_t> worker_steps;
  std::int64_t gradients = -1;
  std::string created;         // UTC, ISO 8601
  std::uint64_t checksum = 0;  // sum of element hashes of every dataset (see format doc)
  // Which run wrote the file (docs/CHECKPOINT_FORMAT.md, "Runs"); all empty (parent_step -1) in
  // files of drtrain before run ids: an unknown run.
  std::string run_id;             // 32 hex digits, fresh for every job
  std::string parent_run_id;      // the run of the checkpoint this run resumed; empty: from scratch (or unknown)
  std::int64_t parent_step = -1;  // that checkpoint's step; -1: from scratch
  std::string lineage;            // io::Lineage::text(): ancestors "run@step", then run_id
};

// What a checkpoint must match to be resumed by a run: the model's definition (not the words of
// --model: the same file by another path resumes, an edited one under the same name does not),
// and the training data's identity ("images 1x28x28; 10 classes; 60000 train samples; header
// 9f2c...": kind and shape, classes or vocabulary, sample count, a hash of the file's first 64
// KiB). Files from before these were stored are matched by --model's words and the tensors.
struct ResumeMatch {
  std::string model;             // --model, as given
  std::string model_definition;  // nn::ModelGraph::to_text() of this run's model
  std::string data_identity;     // this run's training data
};

// This PS's part of the state: the spans of the flat space its shard holds (one for a
// contiguous plan, many for a striped one), of the parameters and of each optimizer slot (in
// the order of slot_names), each buffer the spans back to back.
struct ShardView {
  std::vector<ShardSpan> spans;
  float* params = nullptr;
  std::vector<float*> slots;
  // The flat range [begin, end) held at the start of the buffers.
  static ShardView range(std::size_t begin, std::size_t end, float* params, std::vector<float*> slots = {}) {
    return {{{begin, end, 0}}, params, std::move(slots)};
  }
  std::size_t size() const {  // elements in each buffer
    std::size_t n = 0;
    for (const ShardSpan& s : spans) n += s.size();
    return n;
  }
};

// Collective over `ps`: checks that `path` fits this run (model, tensors and shapes, optimizer
// slots, format version: ConfigError naming the field, both values and what to do), reads
// every PS's part into `shard`, and verifies the checksum (CheckpointError on corruption).
// Every PS throws the same error.
CheckpointMeta read_checkpoint(const comm::Comm& ps, const std::string& path, const ResumeMatch& match,
                               const ParamLayout& layout, const std::vector<std::string>& slot_names,
                               const ShardView& shard);

// Serial access to a whole checkpoint, for drtrain-ckpt and tests.
class CheckpointFile {
 public:
  struct Tensor {
    std::string path;  // "/params/fc1.weight", "/optimizer/momentum/fc1.weight"
    std::vector<std::int64_t> shape;
    std::vector<float> values;
  };
  // Opens and reads the metadata (CheckpointError if it cannot).
  explicit CheckpointFile(const std::string& path);
  ~CheckpointFile();
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;

  const CheckpointMeta& meta() const { return meta_; }
  // Dataset paths, parameters first, then each slot's tensors, in file order.
  std::vector<std::string> datasets() const;
  std::vector<std::string> slot_names() const;
  Tensor read(const std::string& dataset) const;
  // Recomputes the checksum over every dataset; CheckpointError naming the mismatch.
  void verify() const;

 private:
  std::string path_;
  long long file_ = -1;  // hid_t
  CheckpointMeta meta_;
};

// The checksum term of `count` consecutive elements of one dataset, starting at flat index
// `first`. Sums of terms (mod 2^64) over all elements of all datasets give the checksum.
std::uint64_t checksum_part(const std::string& dataset, std::uint64_t first, const float* values, std::size_t count);

}  // namespace drt::io
