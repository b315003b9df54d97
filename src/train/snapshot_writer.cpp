#include "drtrain/train/snapshot_writer.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::train {

SnapshotWriter::~SnapshotWriter() {
  if (thread_.joinable()) thread_.join();
}

void SnapshotWriter::start(io::CheckpointParts parts, const io::ShardView& live, Faults faults) {
  DRT_ASSERT(!running(), "a checkpoint snapshot is still being written");
  const std::size_t n = live.size();
  if (params_.size() != n || slots_.size() != live.slots.size()) {
    params_ = AlignedBuffer<float>(n);
    slots_.clear();
    for (std::size_t k = 0; k < live.slots.size(); ++k) slots_.emplace_back(n);
  }
  std::copy(live.params, live.params + n, params_.data());
  for (std::size_t k = 0; k < slots_.size(); ++k) std::copy(live.slots[k], live.slots[k] + n, slots_[k].data());
  io::ShardView copy{live.spans, params_.data(), {}};
  for (auto& s : slots_) copy.slots.push_back(s.data());
  finished_.store(false, std::memory_order_relaxed);
  progress_.store(0, std::memory_order_relaxed);
  sum_ = 0;
  error_ = nullptr;
  thread_ = std::thread([this, parts = std::move(parts), copy = std::move(copy), faults = std::move(faults)] {
    const auto bump = [this](std::size_t) { progress_.fetch_add(1, std::memory_order_relaxed); };
    for (double slept = 0; slept < faults.delay_s || (faults.hold && faults.hold()); slept += 0.05) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      bump(0);
    }
    try {
      if (faults.fail) throw Error(str("writing ", parts.path, ": No space left on device (test fault)"));
      sum_ = io::write_parts(parts, copy, bump);
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_.store(true, std::memory_order_release);
  });
}

std::uint64_t SnapshotWriter::take() {
  DRT_ASSERT(running(), "no checkpoint snapshot is being written");
  thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return sum_;
}

std::size_t SnapshotWriter::snapshot_bytes() const { return sizeof(float) * params_.size() * (1 + slots_.size()); }

}  // namespace drt::train
