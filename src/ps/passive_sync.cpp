// --rma-sync passive: one MPI_Win_lock_all epoch on every window for the whole run, and
// per-block signals through the control window.
//
// Ordering for block b of PS p in step t (W workers):
//   worker  Accumulate|Put block b -> Win_flush(p, its window)   the gradient is complete at p
//           arrivals[b] += 1, pushed[w][b] = t+1 (control, flushed)  ... and only then announced
//   PS      poll arrivals[] until arrivals[b] >= (t+1) W -> Win_sync  gradients visible to loads
//           apply block b, zero its sum -> Win_sync              stores visible to remote Gets
//           version[b] = t+2 (control, flushed)
//   worker  poll version[b] >= t+2 -> Get block b -> Win_flush_all at complete_pull()
// A worker pushes block b of step t+1 only after its Get of version t+2 completed, which was
// after the PS zeroed the sum; the PS writes block b's parameters again only after every
// worker announced block b of step t+1, i.e. after each worker's Gets of step t completed.
// Blocks of one step move independently, so pushes, applies and pulls overlap in a pipeline.
// Waiting ranks nap between polls (comm/poll.hpp) and give up after --hang-timeout.
#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "control_channel.hpp"
#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "sync_protocol.hpp"

namespace drt::ps {
namespace {

class PassiveSync final : public SyncProtocol {
 public:
  PassiveSync(const comm::Topology& topo, ShardWindow& window, const ExchangeConfig& config)
      : topo_(topo), window_(window), config_(config), control_(window) {
    for (int w = 0; w < window.num_data_windows(); ++w)
      data_epochs_.push_back(std::make_unique<comm::PassiveEpoch>(window.data_window(w)));
    for (int p = 0; p < window.num_ps(); ++p)
      versions_.emplace_back(static_cast<std::size_t>(window.layout(p).num_blocks()), 0);
  }

  void start(const std::function<void()>& upload) override {
    // PS stores (zeroing, restore) -> Win_sync -> barrier -> the chief's Puts: the barrier, not
    // MPI_Win_allocate (which need not synchronise), is what orders the upload after the zeroing.
    if (topo_.is_ps()) {
      sync_local_memory();
      DRT_MPI_CHECK(MPI_Win_sync(window_.control().get()));
    }
    comm::sleepy_barrier(topo_.world(), config_.hang_timeout_s, config_.max_nap_us,
                         "every PS to prepare its windows");
    if (upload) {
      upload();
      DRT_MPI_CHECK(MPI_Win_flush_all(window_.data(0)));
    }
    comm::sleepy_barrier(topo_.world(), config_.hang_timeout_s, config_.max_nap_us,
                         "the initial parameters to reach every PS");
    if (topo_.is_ps()) sync_local_memory();
  }

  void await_predecessor(int ps, int block, std::int64_t pushes) override {
    // Workers announce block b in worker order, so worker w may go once the block's arrival
    // count has reached every earlier step's W pushes plus workers 0..w-1 of this one.
    const int before = topo_.role_index() - 1;
    const MPI_Aint word = window_.layout(ps).arrivals_word(block);
    const std::int64_t needed = (pushes - 1) * topo_.num_workers() + topo_.role_index();
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    std::int64_t seen = 0;
    for (control_.read(ps, word, 1, &seen); seen < needed; control_.read(ps, word, 1, &seen))
      if (!waiter.pause())
        throw HangError(str(rank_tag(), ": ", topo_.my_name(), " waited ", static_cast<int>(waiter.waited_seconds()),
                            " s for ", topo_.worker_name(before), " to push block ", block, " of ", topo_.ps_name(ps),
                            " for step ", pushes - 1, " (--grad-push ordered); that worker is dead, stopped or "
                            "stuck (raise --hang-timeout if it is only slow)"));
  }

  void block_pushed(int ps, int block, std::int64_t pushes) override {
    const ShardLayout& layout = window_.layout(ps);
    const int me = topo_.role_index();
    const WindowSpot spot = layout.grad(me, layout.block_begin(block));
    DRT_MPI_CHECK(MPI_Win_flush(window_.target(ps), window_.data(spot.window)));
    control_.update(ps, {{layout.arrivals_word(block), MPI_SUM, 1}, {layout.pushed_word(me, block), MPI_REPLACE, pushes}});
  }

  void complete_push(std::int64_t /*pushes*/) override {}  // every block was announced already

  bool block_published(int ps, int block, std::int64_t version, bool refresh) override {
    std::vector<std::int64_t>& seen = versions_[static_cast<std::size_t>(ps)];
    if (seen[static_cast<std::size_t>(block)] >= version) return true;
    if (refresh) control_.read(ps, window_.layout(ps).version_word(0), static_cast<int>(seen.size()), seen.data());
    return seen[static_cast<std::size_t>(block)] >= version;
  }

  void await_block(int ps, int block, std::int64_t version) override {
    if (block_published(ps, block, version, false)) return;
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    while (!block_published(ps, block, version, true))
      if (!waiter.pause()) throw publish_hang(ps, block, version, waiter.waited_seconds());
  }

  void complete_pull() override {
    comm::Watchdog::beat("completing the Gets of parameters", window_.num_ps() == 1 ? window_.target(0) : -1);
    DRT_MPI_CHECK(MPI_Win_flush_all(window_.data(0)));
  }

  void complete_local(int ps) override {
    for (int w = 0; w < window_.num_data_windows(); ++w)
      DRT_MPI_CHECK(MPI_Win_flush_local(window_.target(ps), window_.data(w)));
  }

  void depart() override {
    for (int p = 0; p < window_.num_ps(); ++p) control_.add(p, window_.layout(p).departed_word(), 1);
  }

  bool await_blocks(std::int64_t pushes, const std::vector<bool>& applied, std::vector<int>& ready) override {
    const int me = topo_.role_index();
    const std::int64_t workers = topo_.num_workers();
    const ShardLayout& layout = window_.layout(me);
    const int blocks = layout.num_blocks();
    // arrivals[0..B) then departed: one read of B+1 contiguous words per poll, whatever W.
    std::vector<std::int64_t> words(static_cast<std::size_t>(blocks) + 1);
    const std::int64_t& departed = words.back();
    const std::int64_t complete = pushes * workers;  // arrivals of a block once step pushes-1 is in
    const bool fresh = std::none_of(applied.begin(), applied.end(), [](bool a) { return a; });
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    for (;;) {
      control_.read(me, layout.arrivals_word(0), static_cast<int>(words.size()), words.data());
      for (int b = 0; b < blocks; ++b)
        if (!applied[static_cast<std::size_t>(b)] && words[static_cast<std::size_t>(b)] >= complete) ready.push_back(b);
      if (!ready.empty()) {
        sync_local_memory();
        return true;
      }
      if (fresh && departed == workers) {
        for (int b = 0; b < blocks; ++b)
          if (words[static_cast<std::size_t>(b)] != complete - workers) {
            const std::vector<std::string> ahead = workers_past(me, b, pushes - 1);
            throw Error(str(rank_tag(), ": ", join(ahead, ", "), " left ", topo_.my_name(), " after pushing block ", b,
                            " more often than the ", pushes - 1, " step(s) the PS applied; every worker must run "
                            "the same number of steps"));
          }
        return false;
      }
      if (!waiter.pause()) {
        std::vector<std::string> missing;
        for (int b = 0; b < blocks && missing.empty(); ++b)
          if (!applied[static_cast<std::size_t>(b)]) missing = workers_short_of(me, b, pushes);
        throw HangError(str(rank_tag(), ": ", topo_.my_name(), " waited ", static_cast<int>(waiter.waited_seconds()),
                            " s for the gradients of step ", pushes - 1, " from ", join(missing, ", "),
                            "; that worker is dead, stopped or stuck (raise --hang-timeout if it is only slow)"));
      }
    }
  }

  void publish(const std::vector<int>& blocks, std::int64_t version) override {
    sync_local_memory();
    const ShardLayout& layout = window_.layout(topo_.role_index());
    std::vector<MPI_Aint> words;
    for (int b : blocks) words.push_back(layout.version_word(b));
    control_.write(topo_.role_index(), words, version);
  }

 private:
  // Orders this PS's loads and stores of window memory against the peers' RMA (unified model).
  void sync_local_memory() {
    for (int w = 0; w < window_.num_data_windows(); ++w) DRT_MPI_CHECK(MPI_Win_sync(window_.data(w)));
  }

  // The workers whose last announced push of block `block` of PS `ps` is below / above `pushes`
  // (read from the per-worker words, which only diagnoses use).
  std::vector<std::string> workers_short_of(int ps, int block, std::int64_t pushes) { return workers_where(ps, block, pushes, -1); }
  std::vector<std::string> workers_past(int ps, int block, std::int64_t pushes) { return workers_where(ps, block, pushes, +1); }
  std::vector<std::string> workers_where(int ps, int block, std::int64_t pushes, int sign) {
    std::vector<std::string> names;
    for (int w = 0; w < topo_.num_workers(); ++w) {
      std::int64_t pushed = 0;
      control_.read(ps, window_.layout(ps).pushed_word(w, block), 1, &pushed);
      if (sign < 0 ? pushed < pushes : pushed > pushes) names.push_back(topo_.worker_name(w));
    }
    return names;
  }

  // A worker gave up waiting for block `block` of PS `ps`: the per-worker words (readable by
  // anyone) tell whether a worker never pushed (it is the culprit) or the PS itself is stuck.
  HangError publish_hang(int ps, int block, std::int64_t version, double waited) {
    const std::vector<std::string> missing = workers_short_of(ps, block, version - 1);
    const std::int64_t seen = versions_[static_cast<std::size_t>(ps)][static_cast<std::size_t>(block)];
    return HangError(str(rank_tag(), ": ", topo_.my_name(), " waited ", static_cast<int>(waited), " s for ",
                         topo_.ps_name(ps), " to publish block ", block, " after step ", version - 2,
                         " (it has published ", seen, " version(s) of it); ",
                         missing.empty() ? str("every worker has pushed it, so ", topo_.ps_name(ps), " is dead, stopped or stuck")
                                         : str("it still lacks the gradients of ", join(missing, ", "),
                                               ", which is dead, stopped or stuck"),
                         " (raise --hang-timeout if it is only slow)"));
  }

  const comm::Topology& topo_;
  ShardWindow& window_;
  ExchangeConfig config_;
  ControlChannel control_;
  std::vector<std::unique_ptr<comm::PassiveEpoch>> data_epochs_;
  std::vector<std::vector<std::int64_t>> versions_;  // worker: newest known version of each block
};

}  // namespace

std::unique_ptr<SyncProtocol> make_passive_sync(const comm::Topology& topo, ShardWindow& window,
                                                const ExchangeConfig& config) {
  return std::make_unique<PassiveSync>(topo, window, config);
}

}  // namespace drt::ps
