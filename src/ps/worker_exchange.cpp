#include "drtrain/ps/worker_exchange.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/kernels/reference.hpp"
#include "protocol.hpp"

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
      chunk_elems_(config.chunk_bytes_for(topo.num_nodes()) / sizeof(float)),
      window_(topo, plan, config),
      protocol_(make_worker_protocol(topo, window_, config)) {
  DRT_ASSERT(topo.is_worker(), "WorkerExchange on a PS rank");
  for (int p = 0; p < plan.num_shards(); ++p)
    block_filled_.emplace_back(static_cast<std::size_t>(window_.layout(p).num_blocks()), 0);
  if (bf16_wire()) {
    grad_wire_.resize(plan.total());
    params_wire_.resize(plan.total());
  }
}

WorkerExchange::~WorkerExchange() = default;

std::vector<Chunk> WorkerExchange::chunks(std::size_t offset, std::size_t count) const {
  std::vector<Chunk> out;
  for (const ShardPiece& piece : plan_.split(offset, count)) {
    const ShardLayout& layout = window_.layout(piece.shard);
    const std::size_t end = piece.local + piece.count;  // in the shard
    for (std::size_t e = piece.local; e < end;) {
      const int block = layout.block_of(e);
      const std::size_t stop = std::min({end, layout.block_begin(block) + layout.block_size(block), e + chunk_elems_});
      out.push_back(
          {piece.shard, block, e, piece.begin + (e - piece.local) - offset, static_cast<int>(stop - e), false});
      e = stop;
    }
  }
  return out;
}

void WorkerExchange::order_push(std::vector<Chunk>& list) {
  // Round-robin over the PS: the k-th chunk of every PS, then the (k+1)-th ...
  std::vector<std::vector<Chunk>> by_ps(static_cast<std::size_t>(window_.num_ps()));
  for (const Chunk& c : list) by_ps[static_cast<std::size_t>(c.ps)].push_back(c);
  list.clear();
  for (std::size_t k = 0;; ++k) {
    bool any = false;
    for (const auto& mine : by_ps)
      if (k < mine.size()) {
        list.push_back(mine[k]);
        any = true;
      }
    if (!any) break;
  }
  // Ordered push: every worker in the same order (worker w follows w-1 block by block).
  if (config_.grad_push() != GradPush::kOrdered && !list.empty())
    std::rotate(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(topo_.role_index() % list.size()), list.end());
  for (Chunk& c : list) {
    std::size_t& filled = block_filled_[static_cast<std::size_t>(c.ps)][static_cast<std::size_t>(c.block)];
    filled += static_cast<std::size_t>(c.count);
    c.completes_block = filled == window_.layout(c.ps).block_size(c.block);
  }
}

void WorkerExchange::account(double t0, double& transfer) {
  const double waited = protocol_->take_wait_seconds();
  times_.wait_s += waited;
  transfer += now_seconds() - t0 - waited;
}

void WorkerExchange::check_open(const char* what) const {
  if (finished_) throw Error(str(rank_tag(), ": ", what, " after WorkerExchange::finish()"));
}

void WorkerExchange::start(const float* initial_params) {
  protocol_->start(topo_.is_chief() ? initial_params : nullptr, chunks(0, plan_.total()));
}

PushHandle WorkerExchange::push(const float* grad, std::size_t offset, std::size_t count) {
  check_open("push");
  if (offset + count > plan_.total())
    throw Error(str(rank_tag(), ": push of [", offset, ", ", offset + count, ") outside the ", plan_.total(),
                    "-element parameter space"));
  const double t0 = now_seconds();
  std::vector<Chunk> list = chunks(offset, count);
  order_push(list);
  if (early_params_ && early_push_ == pushes_ + 1) {
    std::vector<Chunk> issued;
    WorkerProtocol::EarlyPull early{bf16_wire() ? static_cast<void*>(params_wire_.data()) : early_params_, &early_left_,
                                    &issued};
    protocol_->push(to_wire(grad, offset, count), list, pushes_ + 1, &early);
    chunks_early_ += static_cast<std::int64_t>(issued.size());
    widen_later(issued, early_params_);
  } else {
    protocol_->push(to_wire(grad, offset, count), list, pushes_ + 1);
  }
  pushed_elements_ += count;
  PushHandle handle;
  handle.owner_ = this;
  for (const Chunk& c : list)
    if (std::find(handle.targets_.begin(), handle.targets_.end(), c.ps) == handle.targets_.end())
      handle.targets_.push_back(c.ps);
  account(t0, times_.push_s);
  return handle;
}

void WorkerExchange::complete_local(const std::vector<int>& targets) {
  const double t0 = now_seconds();
  protocol_->complete_local(targets);
  account(t0, times_.push_s);
}

void WorkerExchange::finish_push() {
  check_open("finish_push");
  if (pushed_elements_ != plan_.total())
    throw Error(str(rank_tag(), ": step ", pushes_, ": pushed ", pushed_elements_, " gradient elements, expected ",
                    plan_.total(), "; push every element exactly once per step"));
  for (int p = 0; p < window_.num_ps(); ++p)
    for (int b = 0; b < window_.layout(p).num_blocks(); ++b)
      if (block_filled_[static_cast<std::size_t>(p)][static_cast<std::size_t>(b)] != window_.layout(p).block_size(b))
        throw Error(str(rank_tag(), ": step ", pushes_, ": block ", b, " of PS ", p,
                        " was pushed partly twice; push every element exactly once per step"));
  const double t0 = now_seconds();
  protocol_->finish_push(++pushes_);
  pushed_elements_ = 0;
  for (auto& filled : block_filled_) std::fill(filled.begin(), filled.end(), 0);
  account(t0, times_.push_s);
}

PullHandle WorkerExchange::pull(float* params, std::size_t offset, std::size_t count) {
  check_open("pull");
  if (pushed_elements_ != 0) throw Error(str(rank_tag(), ": pull in the middle of a push; call finish_push() first"));
  if (offset + count > plan_.total())
    throw Error(str(rank_tag(), ": pull of [", offset, ", ", offset + count, ") outside the ", plan_.total(),
                    "-element parameter space"));
  const double t0 = now_seconds();
  void* into = params;
  std::vector<Chunk> list = chunks(offset, count);
  if (early_params_ && early_push_ == pushes_) {
    // pull_during_push(): only the chunks that did not go out yet and overlap the range (a chunk
    // reaching into a neighbouring range goes with whichever range is pulled first), with their
    // places in the whole buffer.
    DRT_ASSERT(params == early_params_ + offset, "pull() into another buffer than pull_during_push() named");
    const auto outside = [&](const Chunk& c) {
      return c.at >= offset + count || c.at + static_cast<std::size_t>(c.count) <= offset;
    };
    const auto split = std::stable_partition(early_left_.begin(), early_left_.end(), outside);
    list.assign(split, early_left_.end());
    early_left_.erase(split, early_left_.end());
    widen_later(list, early_params_);
    into = bf16_wire() ? static_cast<void*>(params_wire_.data()) : early_params_;
  } else if (bf16_wire()) {  // widened in complete_pull()
    into = params_wire_.data() + offset;
    to_widen_.push_back({params, offset, count});
  }
  protocol_->pull(into, std::move(list), pushes_ + 1);
  account(t0, times_.pull_s);
  PullHandle handle;
  handle.owner_ = this;
  return handle;
}

bool WorkerExchange::published(std::size_t offset, std::size_t count) {
  check_open("published");
  const double t0 = now_seconds();
  const bool yes = protocol_->published(chunks(offset, count), pushes_ + 1);
  account(t0, times_.wait_s);
  return yes;
}

void WorkerExchange::pull_during_push(float* params) {
  check_open("pull_during_push");
  if (pushed_elements_ != 0) throw Error(str(rank_tag(), ": pull_during_push() after the step's first push()"));
  early_params_ = params;
  early_left_ = chunks(0, plan_.total());
  early_push_ = pushes_ + 1;
}

void WorkerExchange::widen_later(const std::vector<Chunk>& list, float* base) {
  if (!bf16_wire()) return;
  for (const Chunk& c : list) to_widen_.push_back({base + c.at, c.at, static_cast<std::size_t>(c.count)});
}

void WorkerExchange::complete_pull() {
  const double t0 = now_seconds();
  protocol_->complete_pull();
  for (const Widen& w : to_widen_) kernels::ref::bf16_to_float(params_wire_.data() + w.offset, w.to, w.count);
  to_widen_.clear();
  account(t0, times_.pull_s);
}

const void* WorkerExchange::to_wire(const float* grad, std::size_t offset, std::size_t count) {
  if (!bf16_wire()) return grad;
  kernels::ref::float_to_bf16(grad, grad_wire_.data() + offset, count);
  return grad_wire_.data() + offset;
}

void WorkerExchange::pull_all(float* params) { pull(params, 0, plan_.total()).wait(); }

void WorkerExchange::step(const float* grad, float* params) {
  check_open("step");
  if (pushed_elements_ != 0) throw Error(str(rank_tag(), ": step() in the middle of a push; call finish_push() first"));
  const double t0 = now_seconds();
  std::vector<Chunk> pushes = chunks(0, plan_.total());
  order_push(pushes);  // every block is complete afterwards (the whole space, once)
  void* into = bf16_wire() ? static_cast<void*>(params_wire_.data()) : params;
  protocol_->step(to_wire(grad, 0, plan_.total()), pushes, into, chunks(0, plan_.total()), ++pushes_);
  if (bf16_wire()) kernels::ref::bf16_to_float(params_wire_.data(), params, plan_.total());
  for (auto& filled : block_filled_) std::fill(filled.begin(), filled.end(), 0);
  account(t0, times_.push_s);  // push and pull overlap: all of it counts as push
}

void WorkerExchange::finish() {
  check_open("finish");
  if (pushed_elements_ != 0) throw Error(str(rank_tag(), ": finish() in the middle of a push"));
  protocol_->depart();
  finished_ = true;
}

std::int64_t WorkerExchange::catch_up() {
  if (config_.mode.kind == SyncKind::kBackup) pushes_ = std::max(pushes_, protocol_->pulled_version() - 1);
  return pushes_;
}

std::int64_t WorkerExchange::max_lead() const { return protocol_->max_lead(); }

void WorkerExchange::request_stop(int signal) { protocol_->request_stop(signal); }

RelaxedWords WorkerExchange::relaxed_words() { return protocol_->relaxed_words(); }

GradNormTotals WorkerExchange::grad_norm_totals() {
  std::array<std::int64_t, ShardLayout::kClipTotals> words{};
  protocol_->read_words(0, window_.layout(0).clip_word(0), ShardLayout::kClipTotals, words.data());
  GradNormTotals t;
  std::memcpy(&t.norm_sum, &words[0], sizeof t.norm_sum);
  t.steps = words[1];
  t.clipped = words[2];
  return t;
}

void WorkerExchange::ack_cut(std::int64_t cut, std::int64_t position) {
  if (pushed_elements_ != 0) throw Error(str(rank_tag(), ": a cut in the middle of a push"));
  protocol_->ack_cut(cut, position);
}

bool WorkerExchange::can_pause_at_cut() { return protocol_->can_pause_at_cut(pushes_); }

void WorkerExchange::leave_at(std::int64_t position) { ack_cut(std::numeric_limits<std::int64_t>::max(), position); }

void WorkerExchange::start_pushes_at(std::int64_t pushes) {
  if (pushes_ != 0 || pushed_elements_ != 0) throw Error(str(rank_tag(), ": start_pushes_at() after a push"));
  pushes_ = pushes;
}

ExchangeTimes WorkerExchange::take_times() { return std::exchange(times_, ExchangeTimes{}); }

}  // namespace drt::ps
