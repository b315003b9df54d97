// --rma-sync passive: one MPI_Win_lock_all epoch on every window for the whole run, and
// per-block signals through the control window.
//
// Ordering for block b of PS p in step t (W workers):
//   worker  Accumulate|Put block b -> Win_flush(p, its window)   the gradient is complete at p
//           pushed[w][b] = t+1 (control, flushed)                ... and only then announced
//   PS      poll pushed[][b] until all >= t+1 -> Win_sync        gradients visible to local loads
//           apply block b, zero its sum -> Win_sync              stores visible to remote Gets
//           version[b] = t+2 (control, flushed)
//   worker  poll version[b] >= t+2 -> Get block b -> Win_flush_all at complete_pull()
// A worker pushes block b of step t+1 only after its Get of version t+2 completed, which was
// after the PS zeroed the sum; the PS writes block b's parameters again only after every
// worker announced block b of step t+1, i.e. after each worker's Gets of step t completed.
// Blocks of one step move independently, so pushes, applies and pulls overlap in a pipeline.
// Waiting ranks nap between polls (comm/poll.hpp) and give up after --hang-timeout.
#include <algorithm>
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

  void start() override {
    if (topo_.is_worker()) DRT_MPI_CHECK(MPI_Win_flush_all(window_.data(0)));
    comm::sleepy_barrier(topo_.world(), config_.hang_timeout_s, config_.max_nap_us,
                         "every rank to reach the start of training");
    if (topo_.is_ps()) sync_local_memory();
  }

  void await_predecessor(int ps, int block, std::int64_t pushes) override {
    const int before = topo_.role_index() - 1;
    const MPI_Aint word = window_.layout(ps).pushed_word(before, block);
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    std::int64_t seen = 0;
    for (control_.read(ps, word, 1, &seen); seen < pushes; control_.read(ps, word, 1, &seen))
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
    control_.write(ps, layout.pushed_word(me, block), pushes);
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
    for (int p = 0; p < window_.num_ps(); ++p) control_.write(p, window_.layout(p).departed_word(topo_.role_index()), 1);
  }

  bool await_blocks(std::int64_t pushes, const std::vector<bool>& applied, std::vector<int>& ready) override {
    const int me = topo_.role_index(), workers = topo_.num_workers();
    const ShardLayout& layout = window_.layout(me);
    const int blocks = layout.num_blocks();
    std::vector<std::int64_t> words(static_cast<std::size_t>(workers) * (static_cast<std::size_t>(blocks) + 1));
    auto pushed = [&](int w, int b) { return words[static_cast<std::size_t>(w * blocks + b)]; };
    auto departed = [&](int w) { return words[static_cast<std::size_t>(workers * blocks + w)]; };
    const bool fresh = std::none_of(applied.begin(), applied.end(), [](bool a) { return a; });
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    for (;;) {
      control_.read(me, layout.pushed_word(0, 0), static_cast<int>(words.size()), words.data());
      for (int b = 0; b < blocks; ++b) {
        bool all = !applied[static_cast<std::size_t>(b)];
        for (int w = 0; w < workers && all; ++w) all = pushed(w, b) >= pushes;
        if (all) ready.push_back(b);
      }
      if (!ready.empty()) {
        sync_local_memory();
        return true;
      }
      bool all_left = fresh;
      for (int w = 0; w < workers && all_left; ++w) all_left = departed(w) != 0;
      if (all_left) {
        for (int w = 0; w < workers; ++w)
          for (int b = 0; b < blocks; ++b)
            if (pushed(w, b) != pushes - 1)
              throw Error(str(rank_tag(), ": ", topo_.worker_name(w), " left ", topo_.my_name(), " after pushing block ", b,
                              " ", pushed(w, b), " time(s) while the PS applied ", pushes - 1,
                              " step(s); every worker must run the same number of steps"));
        return false;
      }
      if (!waiter.pause()) {
        std::vector<std::string> missing;
        for (int w = 0; w < workers; ++w)
          for (int b = 0; b < blocks; ++b)
            if (!applied[static_cast<std::size_t>(b)] && pushed(w, b) < pushes) {
              missing.push_back(topo_.worker_name(w));
              break;
            }
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

  // A worker gave up waiting for block `block` of PS `ps`: the PS's own arrival words (readable
  // by anyone) tell whether a worker never pushed (it is the culprit) or the PS itself is stuck.
  HangError publish_hang(int ps, int block, std::int64_t version, double waited) {
    std::vector<std::string> missing;
    for (int w = 0; w < topo_.num_workers(); ++w) {
      std::int64_t pushed = 0;
      control_.read(ps, window_.layout(ps).pushed_word(w, block), 1, &pushed);
      if (pushed < version - 1) missing.push_back(topo_.worker_name(w));
    }
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
