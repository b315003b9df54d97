// SnapshotWriter (PS only): this PS's part of a checkpoint written by a thread of its
// own while the serve loop goes on (--checkpoint-async, train/checkpointer). start() copies the
// shard's parameters and optimizer slots -- the snapshot, taken at a step boundary, before the
// next apply changes them -- into buffers kept from save to save, then a thread writes the copy
// with io::write_parts (pwrite and fsync: no MPI and no HDF5 call, so neither MPI's thread level
// nor HDF5's lack of thread safety matters; io/checkpoint_writer.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "drtrain/core/aligned_buffer.hpp"
#include "drtrain/io/checkpoint.hpp"
#include "drtrain/io/checkpoint_writer.hpp"

namespace drt::train {

class SnapshotWriter {
 public:
  SnapshotWriter() = default;
  ~SnapshotWriter();  // waits for a write still running (its buffers are this object's)
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // Copies `live` (the parameters and every slot of the shard) and starts writing the copy to
  // `parts`. Not while a write is running.
  struct Faults {        // tests only (core/test_faults.hpp)
    double delay_s = 0;  // a slow file system: the thread first spends this long in small steps
    // A file system slow for as long as hold() says so: the thread first waits in small steps
    // while it returns true (called on the writer thread).
    std::function<bool()> hold;
    bool fail = false;  // a full one: the write fails
  };
  void start(io::CheckpointParts parts, const io::ShardView& live, Faults faults);
  bool running() const { return thread_.joinable(); }
  // The thread has returned: take() will not block. Any thread.
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // Grows while the running write makes progress (pieces written; any thread).
  std::size_t progress() const { return progress_.load(std::memory_order_relaxed); }
  // Waits for the write; returns this PS's checksum term, or rethrows the write's error.
  std::uint64_t take();
  // Memory held for snapshots.
  std::size_t snapshot_bytes() const;

 private:
  AlignedBuffer<float> params_;
  std::vector<AlignedBuffer<float>> slots_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::atomic<std::size_t> progress_{0};
  std::uint64_t sum_ = 0;     // written by the thread before finished_, read after the join
  std::exception_ptr error_;  // likewise
};

}  // namespace drt::train
