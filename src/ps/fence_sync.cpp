// --rma-sync fence: MPI_Win_fence on the single data window, collective over every rank; each
// shard is one block, so a step is three global epochs:
//
//   [push: workers Accumulate/Put]  F1  [apply: PS local stores]  F2  [pull: Gets]  F3
//   F1 = MPI_MODE_NOSUCCEED (no RMA in the apply epoch), F2 = NOPRECEDE | NOPUT (the pull epoch
//   only reads), F3 opens the next push epoch. The window's first fence (NOPRECEDE) opens the
//   epoch in which the chief uploads the initial parameters; start() closes it like F1.
// Arrival and departure words still travel on the control window (passive target, flushed
// before F1), so after F1 the PS knows whether the workers pushed or left.
// MPI_Win_fence cannot time out: a dead peer hangs the job until the launcher notices.
#include <algorithm>
#include <functional>
#include <vector>

#include "control_channel.hpp"
#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "sync_protocol.hpp"

namespace drt::ps {
namespace {

constexpr int kCloseWrites = MPI_MODE_NOSUCCEED;                 // F1
constexpr int kOpenReads = MPI_MODE_NOPRECEDE | MPI_MODE_NOPUT;  // F2

class FenceSync final : public SyncProtocol {
 public:
  FenceSync(const comm::Topology& topo, ShardWindow& window)
      : topo_(topo), window_(window), control_(window) {
    DRT_ASSERT(window.num_data_windows() == 1, "fence needs one data window");
  }

  void start(const std::function<void()>& upload) override {
    // The opening fence orders the PS's stores so far (zeroing, restore) before the upload
    // epoch; the control words get the same from MPI_Win_sync before that fence (a barrier).
    if (topo_.is_ps()) DRT_MPI_CHECK(MPI_Win_sync(window_.control().get()));
    fence(MPI_MODE_NOPRECEDE);
    if (upload) upload();
    fence(kCloseWrites);
  }

  void await_predecessor(int, int, std::int64_t) override {
    throw Error("--grad-push ordered needs --rma-sync passive");
  }

  void block_pushed(int, int, std::int64_t) override {}

  void complete_push(std::int64_t pushes) override {
    const int me = topo_.role_index();
    for (int p = 0; p < window_.num_ps(); ++p) {
      const ShardLayout& layout = window_.layout(p);
      control_.update(p, {{layout.arrivals_word(0), MPI_SUM, 1}, {layout.pushed_word(me, 0), MPI_REPLACE, pushes}});
    }
    fence(kCloseWrites);
  }

  void await_block(int, int, std::int64_t) override {
    if (pull_epoch_open_) return;  // one F2 serves every block of every PS
    fence(kOpenReads);
    pull_epoch_open_ = true;
  }

  bool block_published(int ps, int block, std::int64_t version, bool) override {
    await_block(ps, block, version);
    return true;
  }

  void complete_pull() override {
    DRT_ASSERT(pull_epoch_open_, "complete_pull without await_block");
    fence(0);
    pull_epoch_open_ = false;
  }

  // Inside a fence epoch MPI offers no per-target local completion; the closing fence does it.
  void complete_local(int) override {}

  void depart() override {
    for (int p = 0; p < window_.num_ps(); ++p) control_.add(p, window_.layout(p).departed_word(), 1);
    fence(kCloseWrites);
  }

  bool await_blocks(std::int64_t pushes, const std::vector<bool>&, std::vector<int>& ready) override {
    fence(kCloseWrites);
    const int me = topo_.role_index();
    const std::int64_t workers = topo_.num_workers();
    // One block: arrivals[0] then departed, contiguous.
    std::int64_t words[2] = {0, 0};
    control_.read(me, window_.layout(me).arrivals_word(0), 2, words);
    const bool all_left = words[1] == workers;
    const std::int64_t expected = (all_left ? pushes - 1 : pushes) * workers;
    if (words[0] != expected || (words[1] != 0 && !all_left))
      throw Error(str(rank_tag(), ": ", topo_.my_name(), " found workers out of step after the push fence of step ",
                      pushes - 1, "; every worker must push every step, and all must leave together"));
    if (all_left) return false;
    ready.push_back(0);
    return true;
  }

  void publish(const std::vector<int>&, std::int64_t version) override {
    control_.write(topo_.role_index(), window_.layout(topo_.role_index()).version_word(0), version);
    fence(kOpenReads);
    fence(0);
  }

 private:
  void fence(int assertion) { DRT_MPI_CHECK(MPI_Win_fence(assertion, window_.data(0))); }

  const comm::Topology& topo_;
  ShardWindow& window_;
  ControlChannel control_;
  bool pull_epoch_open_ = false;
};

}  // namespace

std::unique_ptr<SyncProtocol> make_fence_sync(const comm::Topology& topo, ShardWindow& window) {
  return std::make_unique<FenceSync>(topo, window);
}

}  // namespace drt::ps
