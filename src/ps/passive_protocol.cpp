// --rma-sync passive: one MPI_Win_lock_all epoch on every window for the whole run, per-block
// arrival counters and version words in the control window (shard_window.hpp).
//
// Ordering for block b of PS p in step t (W workers), and the MPI-3.1 rule each arrow uses:
//   worker  Accumulate|Put block b -> Win_flush(p)        flush: the operations are complete at
//                                                         the target (11.5.4)
//           arrivals[b] += 1, pushed[w][b] = t+1, flushed  ... and only then announced
//   PS      poll arrivals[] until arrivals[b] >= (t+1) W   the counter is read with an atomic
//                                                         MPI_Get_accumulate(NO_OP)
//           -> Win_sync                                   unified model: the completed remote
//                                                         updates are visible to local loads
//           apply block b, zero its sum -> Win_sync        local stores visible to later RMA
//           version[b] = t+2 (flushed)
//   worker  poll version[b] >= t+2 -> MPI_Rget block b   request completion: the data is in the
//                                                         origin buffer (waited on with naps)
// A worker pushes block b of step t+1 only after its Get of version t+2 completed, which was
// after the PS zeroed the sum (push() checks the version first, so even a caller that skipped
// the pull cannot corrupt the sum); the PS writes block b's parameters again only after every
// worker announced block b of step t+1, i.e. after each worker's Gets of step t completed.
// Nothing here depends on shared memory: every remote access is an RMA call, every ordering a
// flush, a Win_sync or an atomic control word.
//
// Pipelining: a worker visits the PS round-robin (WorkerExchange orders the chunks), so the other
// PS' data is on the wire while one flush waits, and announces each block as soon as it is
// complete, so the PS applies it while later blocks travel. step() also Gets every block that is
// already published while it still pushes: the links carry pushes and pulls at once. (Measured
// on the emulated cluster: announcing two blocks per flush instead, or 1 MiB blocks instead of
// 128 KiB, delays the applies and the overlapping pulls more than it saves in round trips.)
// Waiting ranks nap between polls and give MPI a turn of progress each time (comm/poll.hpp,
// comm/progress.hpp); every wait gives up after --hang-timeout with a message naming the culprit.
#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "control_channel.hpp"
#include "passive_base.hpp"
#include "protocol.hpp"

namespace drt::ps {
namespace {

class PassiveWorker final : public WorkerProtocol, PassiveBase {
 public:
  PassiveWorker(const comm::Topology& topo, ShardWindow& window, const ExchangeConfig& config)
      : PassiveBase(topo, window, config) {
    for (int p = 0; p < window.num_ps(); ++p) {
      const auto blocks = static_cast<std::size_t>(window.layout(p).num_blocks());
      versions_.emplace_back(blocks, 0);
      announced_.emplace_back(blocks, false);
      predecessor_done_.emplace_back(blocks, false);
      if (!relaxed()) continue;
      taken_.emplace_back(blocks, 0);
      computed_from_.emplace_back(blocks, 1);
      pushed_by_all_.emplace_back(blocks * static_cast<std::size_t>(topo.num_workers()), 0);
    }
  }

  void start(const float* initial, const std::vector<Chunk>& all) override {
    std::function<void()> upload;
    if (initial) upload = [&] { issue_upload(window_, initial, all); };
    start_sequence(upload);
  }

  // Gets of the previous version complete first (the PS overwrites a block's parameters once
  // every worker has pushed it again); Gets of the version this push leads to, issued during
  // the step's earlier pushes, may stay in flight.
  void push(const void* grad, const std::vector<Chunk>& chunks, std::int64_t pushes, EarlyPull* early) override {
    if (relaxed() || gets_version_ != pushes + 1) complete_pull();
    push_chunks(grad, chunks, pushes, relaxed() ? nullptr : early);
  }

  // Pushes, and after each announcement (a round trip to that PS anyway) reads that PS's versions
  // and Gets the blocks of the new version that are already published: the pull of the first
  // blocks overlaps the push of the last ones.
  void step(const void* grad, const std::vector<Chunk>& push_list, void* params, std::vector<Chunk> pull_list,
            std::int64_t pushes) override {
    if (relaxed() || gets_version_ != pushes + 1) complete_pull();
    EarlyPull early{params, &pull_list, nullptr};
    push_chunks(grad, push_list, pushes, relaxed() ? nullptr : &early);
    finish_push(pushes);
    pull(params, std::move(pull_list), pushes + 1);
    complete_pull();
  }

  void complete_local(const std::vector<int>& targets) override {
    for (int ps : targets)
      for (int w = 0; w < window_.num_data_windows(); ++w)
        DRT_MPI_CHECK(MPI_Win_flush_local(window_.target(ps), window_.data(w)));
  }

  void finish_push(std::int64_t pushes) override {
    for (int p = 0; p < window_.num_ps(); ++p)  // empty blocks are announced here
      for (int b = 0; b < window_.layout(p).num_blocks(); ++b)
        if (!announced_[static_cast<std::size_t>(p)][static_cast<std::size_t>(b)]) announce(p, b, pushes);
    for (auto& a : announced_) std::fill(a.begin(), a.end(), false);
    for (auto& d : predecessor_done_) std::fill(d.begin(), d.end(), false);
  }

  // Gets blocks in the order the PS publish them: while one block is still being applied, the
  // others are already on their way. Every block left is checked against known versions; when
  // none is ready, each PS's versions are read once, and only then does the worker wait (for the
  // first block left, which times out with a message naming the PS).
  void pull(void* params, std::vector<Chunk> left, std::int64_t version) override {
    gets_version_ = version;
    if (relaxed()) return pull_locked(params, std::move(left), version);
    const auto ready = [&](const Chunk& c) { return known_version(c.ps, c.block) >= version; };
    while (!left.empty()) {
      auto split = std::stable_partition(left.begin(), left.end(), ready);
      if (split == left.begin()) {
        std::vector<bool> refreshed(static_cast<std::size_t>(window_.num_ps()), false);
        for (const Chunk& c : left)
          if (!refreshed[static_cast<std::size_t>(c.ps)]) {
            refreshed[static_cast<std::size_t>(c.ps)] = true;
            refresh_versions(c.ps);
          }
        split = std::stable_partition(left.begin(), left.end(), ready);
        if (split == left.begin()) {
          await_block(left.front().ps, left.front().block, version);
          continue;
        }
      }
      get_chunks(params, left.begin(), split);
      left.erase(left.begin(), split);
    }
  }

  bool published(const std::vector<Chunk>& chunks, std::int64_t version) override {
    std::vector<bool> refreshed(static_cast<std::size_t>(window_.num_ps()), false);
    for (const Chunk& c : chunks) {
      if (known_version(c.ps, c.block) >= version) continue;
      if (refreshed[static_cast<std::size_t>(c.ps)]) return false;
      refreshed[static_cast<std::size_t>(c.ps)] = true;
      refresh_versions(c.ps);
      if (known_version(c.ps, c.block) < version) return false;
    }
    return true;
  }

  // Waits for the Gets (MPI_Testall and naps: no spinning, and a PS that stops answering ends
  // the wait after --hang-timeout, naming it).
  void complete_pull() override {
    if (gets_.empty()) return;
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    for (;;) {
      int done = 0;
      DRT_MPI_CHECK(MPI_Testall(static_cast<int>(gets_.size()), gets_.data(), &done, MPI_STATUSES_IGNORE));
      if (done) break;
      if (!waiter.pause()) throw gets_hang(waiter.waited_seconds());
    }
    gets_.clear();
    gets_ps_.clear();
    release_read_locks();
  }

  void request_stop(int signal) override { request_stop_at_ps0(signal); }
  RelaxedWords relaxed_words() override { return read_relaxed_words(); }
  void read_words(int ps, MPI_Aint word, int count, std::int64_t* out) override { control_.read(ps, word, count, out); }
  bool can_pause_at_cut(std::int64_t pushes) override {
    if (config_.mode.kind != SyncKind::kSsp) return true;
    // A worker v in its push number q waits for this one iff q - S > pushes, i.e. once v has
    // completed pushes + S pushes; block 0 of PS 0 shows at least v's completed count.
    refresh_pushed(0);
    const std::vector<std::int64_t>& all = pushed_by_all_[0];
    const auto blocks = static_cast<std::size_t>(window_.layout(0).num_blocks());
    for (int v = 0; v < topo_.num_workers(); ++v)
      if (v != topo_.role_index() && all[static_cast<std::size_t>(v) * blocks] >= pushes + config_.mode.bound)
        return false;
    return true;
  }

  void ack_cut(std::int64_t cut, std::int64_t position) override {
    DRT_ASSERT(uses_own_slot_only(), "only --sync-mode ssp/async have cuts");
    complete_pull();  // no Get of this worker's is in flight while it waits at the cut
    const int me = topo_.role_index();
    control_.write(0, window_.layout(0).cut_pos_word(me), position);  // complete before the cut is
    control_.write(0, window_.layout(0).cut_ack_word(me), cut);       // acknowledged
  }
  std::int64_t pulled_version() const override { return pulled_min_version_; }
  std::int64_t max_lead() const override { return max_lead_; }

  void depart() override {
    complete_pull();
    for (int p = 0; p < window_.num_ps(); ++p) control_.add(p, window_.layout(p).departed_word(), 1);
  }

 private:
  // Issues `chunks` of push number `pushes`, announcing each block once complete. With `early`:
  // after each announcement, Gets the chunks of that PS's blocks that are already at version
  // pushes + 1, and of one other PS in turn (a push may go to one PS only, e.g. a layer that one
  // shard holds, while the others have blocks ready).
  void push_chunks(const void* grad, const std::vector<Chunk>& chunks, std::int64_t pushes, EarlyPull* early) {
    const int me = topo_.role_index();
    const bool ordered = config_.grad_push() == GradPush::kOrdered;
    for (const Chunk& c : chunks) {
      if (uses_own_slot_only()) await_slot(c.ps, c.block, pushes);
      else await_block(c.ps, c.block, pushes);  // the sum was zeroed (a cache hit after a normal pull)
      if (config_.mode.kind == SyncKind::kSsp) await_bound(c.ps, c.block, pushes);
      if (ordered && me > 0) await_predecessor(c.ps, c.block, pushes);
      issue_gradient(window_, config_, me, grad, c);
      if (!c.completes_block) continue;
      announce(c.ps, c.block, pushes);
      if (!early) continue;
      pull_published(*early, c.ps, pushes + 1);
      const int other = static_cast<int>(next_other_++ % static_cast<std::uint64_t>(window_.num_ps()));
      if (other != c.ps &&
          std::any_of(early->left->begin(), early->left->end(), [&](const Chunk& e) { return e.ps == other; }))
        pull_published(*early, other, pushes + 1);
    }
  }

  // Gets the chunks of PS `ps` in early.left whose blocks are published at `version` (one read of
  // that PS's versions), and moves them from early.left to early.issued (when given).
  void pull_published(EarlyPull& early, int ps, std::int64_t version) {
    gets_version_ = version;
    refresh_versions(ps);
    std::vector<Chunk>& left = *early.left;
    auto split = std::stable_partition(left.begin(), left.end(), [&](const Chunk& c) {
      return !(c.ps == ps && known_version(c.ps, c.block) >= version);
    });
    get_chunks(early.params, split, left.end());
    if (early.issued) early.issued->insert(early.issued->end(), split, left.end());
    left.erase(split, left.end());
  }

  // MPI_Rgets of [begin, end), remembered (with their PS) until complete_pull().
  void get_chunks(void* params, std::vector<Chunk>::const_iterator begin, std::vector<Chunk>::const_iterator end) {
    for (auto it = begin; it != end; ++it) gets_ps_.push_back(it->ps);
    issue_gets(window_, params, begin, end, &gets_);
  }

  // Flushes block `block`'s data to PS `ps` (complete at the target), then announces it.
  void announce(int ps, int block, std::int64_t pushes) {
    const ShardLayout& layout = window_.layout(ps);
    const int me = topo_.role_index();
    DRT_MPI_CHECK(MPI_Win_flush(window_.target(ps), window_.data(layout.grad(me, layout.block_begin(block)).window)));
    std::vector<ControlChannel::Update> updates{{layout.arrivals_word(block), MPI_SUM, 1},
                                                {layout.pushed_word(me, block), MPI_REPLACE, pushes}};
    if (relaxed())  // the version this gradient was computed from (staleness, on the PS)
      updates.push_back({layout.base_word(me, block), MPI_REPLACE,
                         computed_from_[static_cast<std::size_t>(ps)][static_cast<std::size_t>(block)]});
    control_.update(ps, updates);
    announced_[static_cast<std::size_t>(ps)][static_cast<std::size_t>(block)] = true;
  }

  bool relaxed() const { return config_.mode.relaxed(); }
  // ssp and async: the PS consumes each worker's slot on its own (no step-wide version to wait for).
  bool uses_own_slot_only() const { return config_.mode.per_gradient(); }

  // ssp/async: waits until the PS has consumed this worker's push `pushes` - 1 of the block, so
  // its slot may be written again (after a normal pull, a cache hit: the pull waited for it).
  void await_slot(int ps, int block, std::int64_t pushes) {
    std::vector<std::int64_t>& taken = taken_[static_cast<std::size_t>(ps)];
    const auto b = static_cast<std::size_t>(block);
    if (taken[b] >= pushes - 1) return;
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    for (refresh_taken(ps); taken[b] < pushes - 1; refresh_taken(ps))
      if (!waiter.pause())
        throw hang_error(
            waiter.waited_seconds(),
            str(" for ", topo_.ps_name(ps), " to apply its gradient of block ", block, " (push ", pushes - 1, ")"),
            "that PS is dead, stopped or stuck");
    wait_s_ += waiter.waited_seconds();
  }

  // ssp:S: push number `pushes` (step pushes - 1) of a block goes out only once every worker has
  // pushed the block's step pushes - 1 - S, i.e. announced at least pushes - S pushes of it. The
  // lead over the slowest other worker (this step minus that worker's last pushed step, i.e.
  // pushes - its count) is recorded: at most S by construction.
  void await_bound(int ps, int block, std::int64_t pushes) {
    const std::int64_t needed = pushes - config_.mode.bound;
    const auto slowest = [&] {
      const std::vector<std::int64_t>& all = pushed_by_all_[static_cast<std::size_t>(ps)];
      const std::size_t blocks = static_cast<std::size_t>(window_.layout(ps).num_blocks());
      std::int64_t low = std::numeric_limits<std::int64_t>::max();
      for (int w = 0; w < topo_.num_workers(); ++w)
        if (w != topo_.role_index() && !left_[static_cast<std::size_t>(w)])
          low = std::min(low, all[static_cast<std::size_t>(w) * blocks + static_cast<std::size_t>(block)]);
      return low == std::numeric_limits<std::int64_t>::max() ? pushes : low;  // alone: no lead
    };
    if (slowest() < needed) {
      // A worker that has left (a stop: each worker leaves at its own step) holds no one back.
      comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
      for (refresh_pushed(ps); slowest() < needed; refresh_pushed(ps), refresh_left())
        if (!waiter.pause())
          throw hang_error(
              waiter.waited_seconds(),
              str(" (--sync-mode ", to_string(config_.mode), ") for ", join(workers_where(ps, block, needed, -1), ", "),
                  " to push step ", needed - 1, " of block ", block, " of ", topo_.ps_name(ps)),
              "that worker is dead, stopped or stuck");
      wait_s_ += waiter.waited_seconds();
    }
    max_lead_ = std::max(max_lead_, pushes - slowest());
  }

  void refresh_taken(int ps) {
    std::vector<std::int64_t>& taken = taken_[static_cast<std::size_t>(ps)];
    control_.read(ps, window_.layout(ps).taken_word(topo_.role_index(), 0), static_cast<int>(taken.size()),
                  taken.data());
  }

  // ssp: which workers have left (PS 0's cut_ack words hold INT64_MAX for them).
  void refresh_left() {
    std::vector<std::int64_t> acks(left_.size());
    control_.read(0, window_.layout(0).cut_ack_word(0), static_cast<int>(acks.size()), acks.data());
    for (std::size_t v = 0; v < acks.size(); ++v) left_[v] = acks[v] == std::numeric_limits<std::int64_t>::max();
  }

  void refresh_pushed(int ps) {
    std::vector<std::int64_t>& all = pushed_by_all_[static_cast<std::size_t>(ps)];
    control_.read(ps, window_.layout(ps).pushed_word(0, 0), static_cast<int>(all.size()), all.data());
  }

  // The relaxed modes' pull. A block may be read once the PS has published what this worker
  // waits for: backup, version >= `version` (the step's parameters, as under sync); ssp/async,
  // the PS has consumed this worker's last push (taken >= version - 1; it reads its own update).
  // The PS may rewrite a block while other workers are still pushing, so each block is read
  // under its read lock (acquire_read_locks). The versions are read once the locks are held: they are the
  // versions of the data the Gets bring (the PS changes a version only under the write lock).
  // The Gets of the blocks locked together complete, and their locks go back, before the next
  // wait.
  void pull_locked(void* params, std::vector<Chunk> left, std::int64_t version) {
    pulled_min_version_ = std::numeric_limits<std::int64_t>::max();
    const auto readable = [&](const Chunk& c) {
      const std::int64_t published = known_version(c.ps, c.block);
      if (!uses_own_slot_only()) return published >= version;
      return published >= 1 && taken_[static_cast<std::size_t>(c.ps)][static_cast<std::size_t>(c.block)] >= version - 1;
    };
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    while (!left.empty()) {
      bool progressed = false;
      for (int p = 0; p < window_.num_ps(); ++p) {
        auto mine = std::stable_partition(left.begin(), left.end(), [&](const Chunk& c) { return c.ps != p; });
        if (mine == left.end()) continue;
        refresh_versions(p);
        if (uses_own_slot_only()) refresh_taken(p);
        auto ready = std::stable_partition(mine, left.end(), [&](const Chunk& c) { return !readable(c); });
        if (ready == left.end()) continue;
        std::vector<int> blocks;
        for (auto it = ready; it != left.end(); ++it)
          if (std::find(blocks.begin(), blocks.end(), it->block) == blocks.end()) blocks.push_back(it->block);
        const std::vector<int> held = acquire_read_locks(p, blocks);
        if (held.empty()) continue;
        refresh_versions(p);  // under the locks: the versions of what the Gets will read
        auto got = std::stable_partition(ready, left.end(), [&](const Chunk& c) {
          return std::find(held.begin(), held.end(), c.block) == held.end();
        });
        for (int b : held) {
          const std::int64_t v = known_version(p, b);
          computed_from_[static_cast<std::size_t>(p)][static_cast<std::size_t>(b)] = v;
          pulled_min_version_ = std::min(pulled_min_version_, v);
        }
        get_chunks(params, got, left.end());
        left.erase(got, left.end());
        // The locks go back before this worker waits for anything else: a reader that held
        // block b while waiting for block c to be published would stop the PS, which may have
        // to write b before it gets to c.
        complete_pull();
        progressed = true;
      }
      if (progressed || left.empty()) continue;
      if (!waiter.pause()) {
        const Chunk& c = left.front();
        throw hang_error(
            waiter.waited_seconds(),
            str(" (--sync-mode ", to_string(config_.mode), ") to read block ", c.block, " of ", topo_.ps_name(c.ps),
                " (version ", known_version(c.ps, c.block), ", this worker needs ",
                uses_own_slot_only() ? str("its push ", version - 1, " applied") : str("version ", version), ")"),
            "that PS is dead, stopped or stuck, or holds the block");
      }
    }
    wait_s_ += waiter.waited_seconds();
  }

  // Read locks on `blocks` of PS `ps`: readers[b] += 1 for each (one flush), then writing[b] is
  // read (the next flush, so after the increments are complete at the PS); returns the blocks
  // held; where the PS writes, the reader gives the lock back at once and tries again later.
  std::vector<int> acquire_read_locks(int ps, const std::vector<int>& blocks) {
    const ShardLayout& layout = window_.layout(ps);
    std::vector<ControlChannel::Update> add;
    add.reserve(blocks.size());
    for (int b : blocks) add.push_back({layout.readers_word(b), MPI_SUM, 1});
    control_.update(ps, add);
    std::vector<std::int64_t> writing(static_cast<std::size_t>(layout.num_blocks()));
    control_.read(ps, layout.writing_word(0), static_cast<int>(writing.size()), writing.data());
    std::vector<int> held;
    std::vector<ControlChannel::Update> undo;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (writing[static_cast<std::size_t>(blocks[i])] == 0) held.push_back(blocks[i]);
      else undo.push_back({add[i].word, MPI_SUM, -1});
    }
    if (!undo.empty()) control_.update(ps, undo);
    for (int b : held) read_locks_.emplace_back(ps, b);
    return held;
  }

  // After the Gets completed: the blocks may be rewritten.
  void release_read_locks() {
    if (read_locks_.empty()) return;
    std::sort(read_locks_.begin(), read_locks_.end());
    for (auto it = read_locks_.begin(); it != read_locks_.end();) {
      const int ps = it->first;
      std::vector<ControlChannel::Update> release;
      for (; it != read_locks_.end() && it->first == ps; ++it)
        release.push_back({window_.layout(ps).readers_word(it->second), MPI_SUM, -1});
      control_.update(ps, release);
    }
    read_locks_.clear();
  }

  std::int64_t known_version(int ps, int block) const {
    return versions_[static_cast<std::size_t>(ps)][static_cast<std::size_t>(block)];
  }

  void refresh_versions(int ps) {
    std::vector<std::int64_t>& seen = versions_[static_cast<std::size_t>(ps)];
    control_.read(ps, window_.layout(ps).version_word(0), static_cast<int>(seen.size()), seen.data());
  }

  // Blocks until block `block` of PS `ps` is published at version >= `version`.
  void await_block(int ps, int block, std::int64_t version) {
    if (known_version(ps, block) >= version) return;
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    for (refresh_versions(ps); known_version(ps, block) < version; refresh_versions(ps))
      if (!waiter.pause()) throw publish_hang(ps, block, version, waiter.waited_seconds());
    wait_s_ += waiter.waited_seconds();
  }

  // --grad-push ordered: workers announce block b in worker order, so worker w may go once the
  // block's arrival count has reached every earlier step's W pushes plus workers 0..w-1 of this.
  void await_predecessor(int ps, int block, std::int64_t pushes) {
    auto done = predecessor_done_[static_cast<std::size_t>(ps)].begin() + block;
    if (*done) return;
    const int before = topo_.role_index() - 1;
    const MPI_Aint word = window_.layout(ps).arrivals_word(block);
    const std::int64_t needed = (pushes - 1) * topo_.num_workers() + topo_.role_index();
    comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
    std::int64_t seen = 0;
    for (control_.read(ps, word, 1, &seen); seen < needed; control_.read(ps, word, 1, &seen))
      if (!waiter.pause())
        throw hang_error(waiter.waited_seconds(),
                         str(" for ", topo_.worker_name(before), " to push block ", block, " of ", topo_.ps_name(ps),
                             " for step ", pushes - 1, " (--grad-push ordered)"),
                         "that worker is dead, stopped or stuck");
    wait_s_ += waiter.waited_seconds();
    *done = true;
  }

  // A worker gave up waiting for its Gets: the blocks were published, so every worker had pushed
  // them and the PS that does not answer is the culprit.
  HangError gets_hang(double waited) {
    std::vector<std::string> silent;
    for (std::size_t i = 0; i < gets_.size(); ++i) {
      int done = 0;
      DRT_MPI_CHECK(MPI_Test(&gets_[i], &done, MPI_STATUS_IGNORE));
      const std::string name = topo_.ps_name(gets_ps_[i]);
      if (!done && std::find(silent.begin(), silent.end(), name) == silent.end()) silent.push_back(name);
    }
    const std::string who = join(silent, ", ");
    return HangError(str(rank_tag(), ": ", topo_.my_name(), " waited ", static_cast<int>(waited),
                         " s for its MPI_Gets of published parameters from ", who, "; they are published, so ", who,
                         silent.size() == 1 ? " is" : " are",
                         " dead, stopped or stuck (raise --hang-timeout "
                         "if it is only slow)"));
  }

  // A worker gave up waiting for block `block` of PS `ps`: first, which PS answer at all (a
  // bounded read: a PS on a lost node would block a plain one for ever); then `ps`'s per-worker
  // words (readable by anyone) tell whether a worker never pushed (it is the culprit) or the PS
  // itself is stuck.
  HangError publish_hang(int ps, int block, std::int64_t version, double waited) {
    const std::string head = str(rank_tag(), ": ", topo_.my_name(), " waited ", static_cast<int>(waited), " s for ",
                                 topo_.ps_name(ps), " to publish block ", block, " after step ", version - 2,
                                 " (it has published ", known_version(ps, block), " version(s) of it); ");
    const std::string unreachable = unreachable_ps();
    if (!unreachable.empty()) return HangError(str(head, unreachable, " (raise --hang-timeout if it is only slow)"));
    const std::vector<std::string> missing = workers_where(ps, block, version - 1, -1);
    std::string culprit = str("every worker has pushed it, so ", topo_.ps_name(ps), " is dead, stopped or stuck");
    if (!missing.empty())
      culprit = str("it still lacks the gradients of ", join(missing, ", "), ", which is dead, stopped or stuck");
    // --grad-clip: a PS that has offered its share of the step's norm waits for the other PS'.
    std::vector<std::int64_t> norm_steps(static_cast<std::size_t>(window_.num_ps()));
    for (int p = 0; p < window_.num_ps(); ++p)
      control_.read(p, window_.layout(p).clip_word(ShardLayout::kNormStepWord), 1,
                    &norm_steps[static_cast<std::size_t>(p)]);
    std::vector<std::string> late;
    for (int p = 0; p < window_.num_ps(); ++p)
      if (norm_steps[static_cast<std::size_t>(p)] < version - 1) late.push_back(topo_.ps_name(p));
    if (missing.empty() && norm_steps[static_cast<std::size_t>(ps)] == version - 1 && !late.empty())
      culprit = str("every worker has pushed it and ", topo_.ps_name(ps),
                    " waits for the shares of the step's gradient norm from ", join(late, ", "),
                    " (--grad-clip), which ", late.size() == 1 ? "is" : "are", " dead, stopped or stuck");
    return HangError(str(head, culprit, " (raise --hang-timeout if it is only slow)"));
  }

  std::vector<std::vector<std::int64_t>> versions_;  // newest known version of each block
  std::vector<std::vector<bool>> announced_;         // per PS, per block: announced this step
  std::vector<std::vector<bool>> predecessor_done_;  // ordered push: worker w-1 announced it
  std::vector<MPI_Request> gets_;                    // MPI_Rgets issued and not yet completed
  std::int64_t gets_version_ = 0;                    // the version the last pull() read
  std::uint64_t next_other_ = 0;                     // early pulls: the next other PS to look at
  std::vector<int> gets_ps_;                         // the PS each of them reads from
  // The relaxed modes (--sync-mode backup/ssp/async):
  std::vector<std::vector<std::int64_t>> taken_;          // per PS, per block: pushes of this worker the PS consumed
  std::vector<std::vector<std::int64_t>> computed_from_;  // per PS, per block: the version last pulled
  std::vector<std::vector<std::int64_t>> pushed_by_all_;  // ssp: per PS, pushed[W][B] as last read
  std::vector<bool> left_ = std::vector<bool>(static_cast<std::size_t>(topo_.num_workers()), false);  // ssp
  std::vector<std::pair<int, int>> read_locks_;  // (PS, block) read locks held until complete_pull()
  std::int64_t pulled_min_version_ = 1;          // the oldest block version of the last pull
  std::int64_t max_lead_ = 0;                    // ssp: most steps ahead of the slowest worker
};

class PassiveServer final : public ServerProtocol, PassiveBase {
 public:
  PassiveServer(const comm::Topology& topo, ShardWindow& window, const ExchangeConfig& config)
      : PassiveBase(topo, window, config) {}

  void start() override { start_sequence({}); }

  bool await_blocks(std::int64_t pushes, const std::vector<bool>& applied, std::vector<int>& ready) override {
    const int me = topo_.role_index();
    const std::int64_t workers = topo_.num_workers();
    const ShardLayout& layout = window_.layout(me);
    const int blocks = layout.num_blocks();
    // arrivals[0..B) then departed: one read of B+1 contiguous words per poll, whatever W.
    std::vector<std::int64_t> words(static_cast<std::size_t>(blocks) + 1);
    const std::int64_t complete = pushes * workers;  // a block's arrivals once step pushes-1 is in
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
      if (fresh && words.back() == workers) {
        for (int b = 0; b < blocks; ++b)
          if (words[static_cast<std::size_t>(b)] != complete - workers)
            throw Error(str(rank_tag(), ": ", join(workers_where(me, b, pushes - 1, +1), ", "), " left ",
                            topo_.my_name(), " after pushing block ", b, " more often than the ", pushes - 1,
                            " step(s) the PS applied; every worker must run the same number of steps"));
        return false;
      }
      if (!waiter.pause()) {
        std::vector<std::string> missing;
        for (int b = 0; b < blocks && missing.empty(); ++b)
          if (!applied[static_cast<std::size_t>(b)]) missing = workers_where(me, b, pushes, -1);
        throw hang_error(waiter.waited_seconds(),
                         str(" for the gradients of step ", pushes - 1, " from ", join(missing, ", ")),
                         "that worker is dead, stopped or stuck");
      }
    }
  }

  void write_words(MPI_Aint word, const std::vector<std::int64_t>& values) override { write_own_words(word, values); }
  void read_words(int ps, MPI_Aint word, int count, std::int64_t* out) override { control_.read(ps, word, count, out); }

  void publish(const std::vector<int>& blocks, std::int64_t version) override {
    sync_local_memory();
    const ShardLayout& layout = window_.layout(topo_.role_index());
    std::vector<MPI_Aint> words;
    words.reserve(blocks.size());
    for (int b : blocks) words.push_back(layout.version_word(b));
    control_.write(topo_.role_index(), words, version);
  }
};

}  // namespace

std::unique_ptr<WorkerProtocol> make_passive_worker(const comm::Topology& topo, ShardWindow& window,
                                                    const ExchangeConfig& config) {
  return std::make_unique<PassiveWorker>(topo, window, config);
}

std::unique_ptr<ServerProtocol> make_passive_server(const comm::Topology& topo, ShardWindow& window,
                                                    const ExchangeConfig& config) {
  return std::make_unique<PassiveServer>(topo, window, config);
}

}  // namespace drt::ps
