// --rma-sync fence: MPI_Win_fence on the single data window, collective over every rank; each
// shard is one block, so a step is three global epochs:
//
//   [push: workers Accumulate/Put]  F1  [apply: PS local stores]  F2  [pull: Gets]  F3
//   F1 = MPI_MODE_NOSUCCEED (no RMA in the apply epoch), F2 = NOPRECEDE | NOPUT (the pull epoch
//   only reads), F3 opens the next push epoch. start() opens an epoch (NOPRECEDE) in which the
//   chief uploads the initial parameters and closes it like F1. A fence completes every RMA
//   operation of the epoch it closes at origin and target, and orders local stores before it
//   against RMA after it (MPI-3.1 11.5.1), so the PS's zeroing and applies need no Win_sync.
// Arrival and departure counters travel on the control window (passive target, flushed before
// F1), so after F1 the PS knows whether the workers pushed or left.
// MPI_Win_fence cannot time out: a dead peer hangs the job until the launcher notices.
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "control_channel.hpp"
#include "protocol.hpp"

namespace drt::ps {
namespace {

constexpr int kCloseWrites = MPI_MODE_NOSUCCEED;                 // F1
constexpr int kOpenReads = MPI_MODE_NOPRECEDE | MPI_MODE_NOPUT;  // F2

class FenceBase {
 protected:
  FenceBase(const comm::Topology& topo, ShardWindow& window) : topo_(topo), window_(window), control_(window) {
    DRT_ASSERT(window.num_data_windows() == 1, "fence needs one data window");
  }

  void fence(int assertion) { DRT_MPI_CHECK(MPI_Win_fence(assertion, window_.data(0))); }

  // The opening fence orders the PS's stores so far (zeroing, restore) before the upload epoch;
  // the control words get the same from MPI_Win_sync before that fence (a barrier).
  void start_sequence(const std::function<void()>& upload) {
    if (topo_.is_ps()) DRT_MPI_CHECK(MPI_Win_sync(window_.control().get()));
    fence(MPI_MODE_NOPRECEDE);
    if (upload) upload();
    fence(kCloseWrites);
  }

  const comm::Topology& topo_;
  ShardWindow& window_;
  ControlChannel control_;
};

class FenceWorker final : public WorkerProtocol, FenceBase {
 public:
  FenceWorker(const comm::Topology& topo, ShardWindow& window, const ExchangeConfig& config)
      : FenceBase(topo, window), config_(config) {}

  void start(const float* initial, const std::vector<Chunk>& all) override {
    std::function<void()> upload;
    if (initial) upload = [&] { issue_upload(window_, initial, all); };
    start_sequence(upload);
  }

  void push(const void* grad, const std::vector<Chunk>& chunks, std::int64_t /*pushes*/,
            EarlyPull* /*early*/) override {
    close_reads();
    for (const Chunk& c : chunks) issue_gradient(window_, config_, topo_.role_index(), grad, c);
  }

  // Inside a fence epoch MPI offers no local completion per target: the pushed buffers may only
  // be reused after the closing fence, in finish_push() (PushHandle::wait documents this).
  void complete_local(const std::vector<int>& /*targets*/) override {}

  void finish_push(std::int64_t pushes) override {
    const int me = topo_.role_index();
    for (int p = 0; p < window_.num_ps(); ++p) {
      const ShardLayout& layout = window_.layout(p);
      control_.update(p, {{layout.arrivals_word(0), MPI_SUM, 1}, {layout.pushed_word(me, 0), MPI_REPLACE, pushes}});
    }
    fence(kCloseWrites);
    pushes_done_ = pushes;
  }

  void pull(void* params, std::vector<Chunk> chunks, std::int64_t version) override {
    if (reads_closed_for_ == version)
      throw Error(str(rank_tag(), ": under --rma-sync fence every pull of a step must be issued before the first "
                                  "PullHandle::wait()"));
    open_reads();
    issue_gets(window_, params, chunks.begin(), chunks.end());
  }

  bool published(const std::vector<Chunk>& /*chunks*/, std::int64_t /*version*/) override { return true; }

  void read_words(int ps, MPI_Aint word, int count, std::int64_t* out) override { control_.read(ps, word, count, out); }

  void complete_pull() override {
    if (!reads_open_) return;
    fence(0);  // F3
    reads_open_ = false;
    reads_closed_for_ = pushes_done_ + 1;
  }

  // Fence epochs do not overlap: the pull epoch opens after every PS has applied.
  void step(const void* grad, const std::vector<Chunk>& push_chunks, void* params, std::vector<Chunk> pull_chunks,
            std::int64_t pushes) override {
    push(grad, push_chunks, pushes, nullptr);
    finish_push(pushes);
    pull(params, std::move(pull_chunks), pushes + 1);
    complete_pull();
  }

  void depart() override {
    close_reads();
    for (int p = 0; p < window_.num_ps(); ++p) control_.add(p, window_.layout(p).departed_word(), 1);
    fence(kCloseWrites);
  }

 private:
  // F2 of the current version (the PS runs it after every apply), timed as waiting: it ends
  // when the slowest PS has applied.
  void open_reads() {
    if (reads_open_) return;
    const double t0 = now_seconds();
    fence(kOpenReads);
    wait_s_ += now_seconds() - t0;
    reads_open_ = true;
  }

  // Takes part in the current version's pull fences if the caller did not pull (or did not wait
  // for its pull): every rank must run F2 and F3 before the next push epoch.
  void close_reads() {
    if (reads_closed_for_ == pushes_done_ + 1) return;
    open_reads();
    complete_pull();
  }

  ExchangeConfig config_;
  std::int64_t pushes_done_ = 0;
  std::int64_t reads_closed_for_ = 0;  // the version whose pull fences this worker has run
  bool reads_open_ = false;
};

class FenceServer final : public ServerProtocol, FenceBase {
 public:
  FenceServer(const comm::Topology& topo, ShardWindow& window) : FenceBase(topo, window) {}

  void start() override { start_sequence({}); }

  bool await_blocks(std::int64_t pushes, const std::vector<bool>&, std::vector<int>& ready) override {
    fence(kCloseWrites);
    const int me = topo_.role_index();
    const std::int64_t workers = topo_.num_workers();
    std::int64_t words[2] = {0, 0};  // arrivals[0], departed: contiguous when there is one block
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

  void write_words(MPI_Aint word, const std::vector<std::int64_t>& values) override {
    control_.write_run(topo_.role_index(), word, values);
  }
  void read_words(int ps, MPI_Aint word, int count, std::int64_t* out) override { control_.read(ps, word, count, out); }

  void publish(const std::vector<int>&, std::int64_t version) override {
    control_.write(topo_.role_index(), window_.layout(topo_.role_index()).version_word(0), version);
    fence(kOpenReads);
    fence(0);
  }
};

}  // namespace

std::unique_ptr<WorkerProtocol> make_fence_worker(const comm::Topology& topo, ShardWindow& window,
                                                  const ExchangeConfig& config) {
  return std::make_unique<FenceWorker>(topo, window, config);
}

std::unique_ptr<ServerProtocol> make_fence_server(const comm::Topology& topo, ShardWindow& window,
                                                  const ExchangeConfig&) {
  return std::make_unique<FenceServer>(topo, window);
}

}  // namespace drt::ps
