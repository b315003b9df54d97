#include "drtrain/ps/shard_window.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "drtrain/comm/agreement.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/core/test_faults.hpp"

namespace drt::ps {
namespace {

constexpr int kMaxStripes = 8;

std::size_t align64(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

// The protocols rely on MPI-3's unified memory model: the PS reads gradients and writes
// parameters with plain loads and stores, ordered against peers' RMA by MPI_Win_sync and
// control words. In the separate model those stores could sit in a private copy that RMA never
// sees. Every component drtrain has met (Open MPI sm, rdma, ucx, pt2pt; MPICH ch4) is unified.
void require_unified(const std::vector<const comm::Window*>& windows, const comm::Comm& world) {
  std::optional<std::string> problem;
  for (const comm::Window* w : windows)
    if (!w->unified())
      problem = "the MPI library gave drtrain an RMA window in the separate memory model (MPI_WIN_SEPARATE); "
                "drtrain's exchange needs MPI_WIN_UNIFIED. With Open MPI choose another one-sided component "
                "(OMPI_MCA_osc=pt2pt on Ethernet, ucx on InfiniBand; see README, 'Running across nodes')";
  comm::raise_if_any(world, problem);
}

}  // namespace

ShardLayout::ShardLayout(std::size_t shard_size, std::size_t block_elems, int num_workers, int stripes,
                         bool per_worker_slots, bool single_data_window, std::size_t wire_bytes)
    : shard_size_(shard_size),
      block_elems_(std::max<std::size_t>(1, std::min(block_elems, shard_size))),
      num_workers_(num_workers),
      stripes_(stripes),
      num_blocks_(static_cast<int>(std::max<std::size_t>(1, (shard_size + block_elems_ - 1) / block_elems_))),
      slots_(per_worker_slots),
      single_(single_data_window),
      wire_bytes_(wire_bytes),
      copy_offset_(static_cast<MPI_Aint>(align64(4 * shard_size))),
      params_bytes_(wire_bytes == 4 ? static_cast<MPI_Aint>(4 * shard_size)
                                    : copy_offset_ + static_cast<MPI_Aint>(wire_bytes * shard_size)),
      grads_offset_(static_cast<MPI_Aint>(align64(static_cast<std::size_t>(params_bytes_)))) {
  DRT_ASSERT(stripes_ >= 1 && (!single_ || stripes_ == 1) && (!slots_ || stripes_ == 1), "stripe layout");
  DRT_ASSERT(wire_bytes == 4 || (wire_bytes == 2 && slots_), "a 16-bit wire needs per-worker slots");
}

std::size_t ShardLayout::block_begin(int b) const {
  return std::min(shard_size_, static_cast<std::size_t>(b) * block_elems_);
}

std::size_t ShardLayout::block_size(int b) const {
  return std::min(shard_size_, block_begin(b) + block_elems_) - block_begin(b);
}

WindowSpot ShardLayout::params(std::size_t element) const { return {0, static_cast<MPI_Aint>(4 * element)}; }

WindowSpot ShardLayout::wire_params(std::size_t element) const {
  if (wire_bytes_ == 4) return params(element);
  return {0, copy_offset_ + static_cast<MPI_Aint>(wire_bytes_ * element)};
}

WindowSpot ShardLayout::grad(int worker, std::size_t element) const {
  if (slots_) {
    const std::size_t at = wire_bytes_ * (static_cast<std::size_t>(worker) * shard_size_ + element);
    return single_ ? WindowSpot{0, grads_offset_ + static_cast<MPI_Aint>(at)}
                   : WindowSpot{1, static_cast<MPI_Aint>(at)};
  }
  if (single_) return {0, grads_offset_ + static_cast<MPI_Aint>(4 * element)};
  // Stripe s holds blocks s, s + K, s + 2K, ... back to back.
  const auto block = static_cast<std::size_t>(block_of(element));
  const std::size_t row = block / static_cast<std::size_t>(stripes_);
  return {1 + static_cast<int>(block % static_cast<std::size_t>(stripes_)),
          static_cast<MPI_Aint>(4 * (row * block_elems_ + element - block * block_elems_))};
}

std::size_t ShardLayout::data_window_bytes(int window) const {
  const std::size_t grad_elems = shard_size_ * (slots_ ? static_cast<std::size_t>(num_workers_) : 1);
  if (single_) return static_cast<std::size_t>(grads_offset_) + wire_bytes_ * grad_elems;
  if (window == 0) return static_cast<std::size_t>(params_bytes_);
  if (slots_) return wire_bytes_ * grad_elems;
  std::size_t floats = 0;  // the blocks of this stripe
  for (int b = window - 1; b < num_blocks_; b += stripes_) floats += block_size(b);
  return 4 * floats;
}

ShardWindow::ShardWindow(const comm::Topology& topo, const ShardPlan& plan, const ExchangeConfig& config)
    : ps_ranks_(topo.ps_world_ranks()) {
  DRT_ASSERT(plan.num_shards() == topo.num_ps(),
             str("shard plan has ", plan.num_shards(), " shards for ", topo.num_ps(), " PS"));
  const bool fence = config.sync == RmaSync::kFence;
  const bool slots = config.per_worker_slots();
  const int stripes = fence || slots ? 1 : std::min(topo.num_workers(), kMaxStripes);
  const std::size_t chunk = config.chunk_bytes_for(topo.num_nodes()) / sizeof(float);
  for (int p = 0; p < plan.num_shards(); ++p) {
    const std::size_t size = plan.shard_size(p);
    layouts_.emplace_back(size, fence ? size : chunk, topo.num_workers(), stripes, slots, fence, config.wire_bytes());
  }
  if (topo.is_ps()) my_ps_ = topo.role_index();
  const int windows = fence ? 1 : 1 + stripes;
  for (int w = 0; w < windows; ++w)
    data_.push_back(comm::Window::allocate(my_ps_ >= 0 ? layout(my_ps_).data_window_bytes(w) : 0, topo.world()));
  control_ = comm::Window::allocate(my_ps_ >= 0 ? 8 * layout(my_ps_).control_words() : 0, topo.world());
  std::vector<const comm::Window*> all{&control_};
  for (const comm::Window& w : data_) all.push_back(&w);
  require_unified(all, topo.world());
  if (my_ps_ >= 0) {
    // Test hook: a PS that clears its memory late must still not lose the chief's upload
    // (SyncProtocol::start orders the zeroing before any peer's access).
    if (test_fault("slow-zeroing")) std::this_thread::sleep_for(std::chrono::seconds(1));
    zero_local_memory();
  }
}

void ShardWindow::zero_local_memory() {
  DRT_ASSERT(my_ps_ >= 0, "only a PS has shard memory");
  // MPI_Win_allocate does not clear memory.
  for (comm::Window& w : data_)
    if (w.bytes() > 0) std::memset(w.base(), 0, w.bytes());
  if (control_.bytes() > 0) std::memset(control_.base(), 0, control_.bytes());
}

float* ShardWindow::local(WindowSpot spot) {
  DRT_ASSERT(my_ps_ >= 0, "only a PS has shard memory");
  return reinterpret_cast<float*>(static_cast<char*>(data_[static_cast<std::size_t>(spot.window)].base()) + spot.disp);
}

}  // namespace drt::ps
