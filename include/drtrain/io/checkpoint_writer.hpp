// Writing a checkpoint (format: docs/CHECKPOINT_FORMAT.md) in three phases, so that the bulk of
// the work -- the tensors' bytes, their checksum, fsync -- can run on a thread that makes no MPI
// and no HDF5 call while the PS goes on training (train/checkpointer, --checkpoint-async):
//   1. create_checkpoint    collective over the PS communicator, on the thread that owns MPI:
//                           PS 0 creates the file with serial HDF5 -- every group, every dataset
//                           (contiguous, its space allocated at creation, never filled), all the
//                           metadata but the checksum -- and every PS learns the byte offset of
//                           each dataset in the file.
//   2. write_parts          this PS's part of every dataset, written with pwrite() at those
//                           offsets, then fsync(); returns the PS's checksum term. Calls neither
//                           MPI nor HDF5, so it may run on any thread.
//   3. complete_checkpoint  PS 0, once every PS's part is on disk: the checksum (the sum of every
//                           PS's term) and `complete`, written last.
// Publication (fsync, rename) and retention are io/checkpoint_store's. write_checkpoint runs the
// three phases in a row on the calling thread. Why pwrite rather than parallel HDF5 (MPI-IO):
// docs/CHECKPOINTS.md, "Checkpoints".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "drtrain/comm/comm.hpp"
#include "drtrain/core/param_layout.hpp"
#include "drtrain/io/checkpoint.hpp"

namespace drt::io {

// Where this PS's part of a new checkpoint goes: one entry per dataset that intersects the shard.
struct CheckpointParts {
  struct Part {
    std::string dataset;           // "/params/fc1.weight"
    std::size_t array = 0;         // 0: ShardView::params; k >= 1: ShardView::slots[k - 1]
    std::size_t shard_offset = 0;  // first element, in the shard's buffer
    std::size_t first = 0;         // first element, relative to the dataset (row-major flat index)
    std::size_t count = 0;
    std::uint64_t file_offset = 0;  // byte offset of element `first` in the file
  };
  std::string path;
  std::vector<Part> parts;
};

// Phase 1, collective over `ps`. `meta.checksum` is ignored; `meta.created` is set here. Every PS
// throws the same Error when PS 0 cannot create the file.
CheckpointParts create_checkpoint(const comm::Comm& ps, const std::string& path, CheckpointMeta meta,
                                  const ParamLayout& layout, const std::vector<std::string>& slot_names,
                                  const std::vector<ShardSpan>& spans);

// Phase 2: writes `shard` (the same spans as in create_checkpoint) in pieces of 1 MiB, calling
// `after_piece(bytes written so far)` after each, then fsyncs. Returns this PS's checksum term.
// Throws Error naming the file and the system's reason.
std::uint64_t write_parts(const CheckpointParts& parts, const ShardView& shard,
                          const std::function<void(std::size_t)>& after_piece = {});

// Phase 3, PS 0 only: writes the checksum and `complete` into `path`. Throws Error.
void complete_checkpoint(const std::string& path, std::uint64_t checksum);

// The three phases in a row, collective over `ps`, with a turn of MPI progress after every MiB
// written (comm/progress.hpp). `after_data` (tests: a fault hook) runs on every PS when all
// parts are written and the checksum is not. Every PS throws the same Error on failure.
void write_checkpoint(const comm::Comm& ps, const std::string& path, const CheckpointMeta& meta,
                      const ParamLayout& layout, const std::vector<std::string>& slot_names, const ShardView& shard,
                      const std::function<void()>& after_data = {});

}  // namespace drt::io
