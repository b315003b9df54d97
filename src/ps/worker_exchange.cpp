#include "drtrain/ps/worker_exchange.hpp"

#include <algorithm>
#include <functional>
#include <utility>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "sync_protocol.hpp"

namespace drt::ps {

void PushHandle::wait() {
  if (owner_) owner_->complete_local(targets_);
  owner_ = nullptr;
}

void PullHandle::wait() {
  if (owner_) owner_->complete_pull();
  owner_ = nullptr;
}

WorkerExchange::WorkerExchange(const comm::Topology& topo, const ShardPlan& plan, const ExchangeConfig& config)
    : topo_(topo),
      plan_(plan),
      config_(config),
      chunk_elems_(config.chunk_bytes / sizeof(float)),
      window_(topo, plan, config),
      sync_(make_sync_protocol(topo, window_, config)) {
  DRT_ASSERT(topo.is_worker(), "WorkerExchange on a PS rank");
  for (int p = 0; p < plan.num_shards(); ++p) {
    const auto blocks = static_cast<std::size_t>(window_.layout(p).num_blocks());
    block_filled_.emplace_back(blocks, 0);
    block_announced_.emplace_back(blocks, false);
    predecessor_done_.emplace_back(blocks, false);
  }
}

WorkerExchange::~WorkerExchange() = default;

std::vector<WorkerExchange::Chunk> WorkerExchange::chunks(std::size_t offset, std::size_t count) const {
  std::vector<Chunk> out;
  for (const ShardPiece& piece : plan_.split(offset, count)) {
    const ShardLayout& layout = window_.layout(piece.shard);
    const std::size_t shard_begin = plan_.shard(piece.shard).begin;
    const std::size_t end = piece.begin + piece.count - shard_begin;
    for (std::size_t e = piece.begin - shard_begin; e < end;) {
      const int block = layout.block_of(e);
      const std::size_t stop = std::min({end, layout.block_begin(block) + layout.block_size(block), e + chunk_elems_});
      out.push_back({piece.shard, block, e, shard_begin + e - offset, static_cast<int>(stop - e)});
      e = stop;
    }
  }
  return out;
}

void WorkerExchange::check_open(const char* what) const {
  if (finished_) throw Error(str(rank_tag(), ": ", what, " after WorkerExchange::finish()"));
}

void WorkerExchange::start(const float* initial_params) {
  std::function<void()> upload;
  if (topo_.is_chief() && initial_params)
    upload = [&] {
      for (const Chunk& c : chunks(0, plan_.total())) {
        const WindowSpot spot = window_.layout(c.ps).params(c.shard_element);
        DRT_MPI_CHECK(MPI_Put(initial_params + c.at, c.count, MPI_FLOAT, window_.target(c.ps), spot.disp, c.count,
                              MPI_FLOAT, window_.data(spot.window)));
      }
    };
  sync_->start(upload);
}

PushHandle WorkerExchange::push(const float* grad, std::size_t offset, std::size_t count) {
  check_open("push");
  if (offset + count > plan_.total())
    throw Error(str(rank_tag(), ": push of [", offset, ", ", offset + count, ") outside the ", plan_.total(),
                    "-element parameter space"));
  if (pushed_elements_ == 0) close_pull_epoch();
  const double t0 = now_seconds();
  const int me = topo_.role_index();
  std::vector<Chunk> pending = chunks(offset, count);
  // Accumulate: workers start at different chunks, so that with gradient sums striped over
  // several windows they add into different windows at the same time instead of queueing on one
  // lock. Ordered: all go in the same order, worker w one block behind worker w-1 (again in
  // another stripe).
  const bool ordered = config_.grad_push() == GradPush::kOrdered;
  if (config_.grad_push() == GradPush::kAccumulate && !pending.empty())
    std::rotate(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(me % pending.size()), pending.end());
  PushHandle handle;
  handle.owner_ = this;
  for (const Chunk& c : pending) {
    // The PS zeroes a block's sum before publishing the block; pushing into it earlier (a caller
    // that skipped the pull) would corrupt the sum. A cache hit after a normal pull.
    if (config_.sync == RmaSync::kPassive) await_block(c.ps, c.block, pushes_ + 1);
    if (ordered && me > 0) await_predecessor(c.ps, c.block);
    const ShardLayout& layout = window_.layout(c.ps);
    const WindowSpot spot = layout.grad(me, c.shard_element);
    const MPI_Win win = window_.data(spot.window);
    if (config_.per_worker_slots() || (ordered && me == 0))
      DRT_MPI_CHECK(MPI_Put(grad + c.at, c.count, MPI_FLOAT, window_.target(c.ps), spot.disp, c.count, MPI_FLOAT, win));
    else
      DRT_MPI_CHECK(MPI_Accumulate(grad + c.at, c.count, MPI_FLOAT, window_.target(c.ps), spot.disp, c.count,
                                   MPI_FLOAT, MPI_SUM, win));
    std::size_t& filled = block_filled_[static_cast<std::size_t>(c.ps)][static_cast<std::size_t>(c.block)];
    filled += static_cast<std::size_t>(c.count);
    if (filled == layout.block_size(c.block)) announce(c.ps, c.block);
    if (std::find(handle.targets_.begin(), handle.targets_.end(), c.ps) == handle.targets_.end())
      handle.targets_.push_back(c.ps);
  }
  pushed_elements_ += count;
  times_.push_s += now_seconds() - t0;
  return handle;
}

void WorkerExchange::await_predecessor(int ps, int block) {
  auto& ready = predecessor_done_[static_cast<std::size_t>(ps)];
  if (ready[static_cast<std::size_t>(block)]) return;
  const double t0 = now_seconds();
  sync_->await_predecessor(ps, block, pushes_ + 1);
  ready[static_cast<std::size_t>(block)] = true;
  times_.wait_s += now_seconds() - t0;
}

void WorkerExchange::announce(int ps, int block) {
  auto announced = block_announced_[static_cast<std::size_t>(ps)].begin() + block;
  if (*announced) return;
  sync_->block_pushed(ps, block, pushes_ + 1);
  *announced = true;
}

void WorkerExchange::complete_local(const std::vector<int>& targets) {
  const double t0 = now_seconds();
  for (int ps : targets) sync_->complete_local(ps);
  times_.push_s += now_seconds() - t0;
}

void WorkerExchange::finish_push() {
  check_open("finish_push");
  if (pushed_elements_ != plan_.total())
    throw Error(str(rank_tag(), ": step ", pushes_, ": pushed ", pushed_elements_, " gradient elements, expected ",
                    plan_.total(), "; push every element exactly once per step"));
  const double t0 = now_seconds();
  for (int p = 0; p < window_.num_ps(); ++p)
    for (int b = 0; b < window_.layout(p).num_blocks(); ++b) {
      if (block_filled_[static_cast<std::size_t>(p)][static_cast<std::size_t>(b)] != window_.layout(p).block_size(b))
        throw Error(str(rank_tag(), ": step ", pushes_, ": block ", b, " of PS ", p,
                        " was pushed partly twice; push every element exactly once per step"));
      announce(p, b);  // empty blocks are announced here
    }
  sync_->complete_push(++pushes_);
  pushed_elements_ = 0;
  for (auto& filled : block_filled_) std::fill(filled.begin(), filled.end(), 0);
  for (auto& announced : block_announced_) std::fill(announced.begin(), announced.end(), false);
  for (auto& done : predecessor_done_) std::fill(done.begin(), done.end(), false);
  times_.push_s += now_seconds() - t0;
}

PullHandle WorkerExchange::pull(float* params, std::size_t offset, std::size_t count) {
  check_open("pull");
  if (pushed_elements_ != 0) throw Error(str(rank_tag(), ": pull in the middle of a push; call finish_push() first"));
  if (offset + count > plan_.total())
    throw Error(str(rank_tag(), ": pull of [", offset, ", ", offset + count, ") outside the ", plan_.total(),
                    "-element parameter space"));
  const std::int64_t version = pushes_ + 1;
  if (config_.sync == RmaSync::kFence && pull_closed_version_ == version)
    throw Error(str(rank_tag(), ": under --rma-sync fence every pull of a step must be issued before the first "
                    "PullHandle::wait()"));
  if (config_.sync == RmaSync::kFence && !pull_open_) await_block(0, 0, version);  // F2 for every PS
  pull_open_ = true;
  // Get blocks in the order the PS publish them: while one block is still being applied, the
  // others are already on their way. Every block left is checked against known versions; when
  // none is ready, each PS's versions are read once, and only then does the worker wait (for the
  // first block left, which times out with a message naming the PS).
  std::vector<Chunk> left = chunks(offset, count);
  while (!left.empty()) {
    const auto ready = [&](const Chunk& c) { return sync_->block_published(c.ps, c.block, version, false); };
    auto split = std::stable_partition(left.begin(), left.end(), ready);
    if (split == left.begin()) {
      std::vector<bool> refreshed(static_cast<std::size_t>(window_.num_ps()), false);
      for (const Chunk& c : left)
        if (!refreshed[static_cast<std::size_t>(c.ps)]) {
          refreshed[static_cast<std::size_t>(c.ps)] = true;
          sync_->block_published(c.ps, c.block, version, true);
        }
      split = std::stable_partition(left.begin(), left.end(), ready);
      if (split == left.begin()) {
        await_block(left.front().ps, left.front().block, version);
        continue;
      }
    }
    const double t0 = now_seconds();
    for (auto it = left.begin(); it != split; ++it) {
      const WindowSpot spot = window_.layout(it->ps).params(it->shard_element);
      DRT_MPI_CHECK(MPI_Get(params + it->at, it->count, MPI_FLOAT, window_.target(it->ps), spot.disp, it->count,
                            MPI_FLOAT, window_.data(spot.window)));
    }
    times_.pull_s += now_seconds() - t0;
    left.erase(left.begin(), split);
  }
  PullHandle handle;
  handle.owner_ = this;
  return handle;
}

void WorkerExchange::await_block(int ps, int block, std::int64_t version) {
  const double t0 = now_seconds();
  sync_->await_block(ps, block, version);
  times_.wait_s += now_seconds() - t0;
}

void WorkerExchange::close_pull_epoch() {
  // Under fence the PS runs the pull fences after every apply, so a worker that did not pull a
  // version (or did not wait for its pull) takes part in them here, before pushing again.
  if (config_.sync == RmaSync::kFence && pull_closed_version_ != pushes_ + 1 && !pull_open_) {
    await_block(0, 0, pushes_ + 1);
    pull_open_ = true;
  }
  complete_pull();
}

void WorkerExchange::complete_pull() {
  if (!pull_open_) return;
  const double t0 = now_seconds();
  sync_->complete_pull();
  pull_open_ = false;
  pull_closed_version_ = pushes_ + 1;
  times_.pull_s += now_seconds() - t0;
}

void WorkerExchange::pull_all(float* params) { pull(params, 0, plan_.total()).wait(); }

void WorkerExchange::step(const float* grad, float* params) {
  push(grad, 0, plan_.total());
  finish_push();
  pull_all(params);
}

void WorkerExchange::finish() {
  check_open("finish");
  if (pushed_elements_ != 0) throw Error(str(rank_tag(), ": finish() in the middle of a push"));
  close_pull_epoch();
  sync_->depart();
  finished_ = true;
}

ExchangeTimes WorkerExchange::take_times() { return std::exchange(times_, ExchangeTimes{}); }

}  // namespace drt::ps
