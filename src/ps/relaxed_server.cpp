#include "relaxed_server.hpp"

#include <string>

#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::ps {

RelaxedServer::RelaxedServer(const comm::Topology& topo, ShardWindow& window, const ExchangeConfig& config)
    : PassiveBase(topo, window, config),
      blocks_(static_cast<std::size_t>(window.layout(topo.role_index()).num_blocks())),
      workers_(topo.num_workers()) {}

void RelaxedServer::start(const std::vector<std::int64_t>& first_pushes) {
  // Local stores before the start sequence's Win_sync and barrier: no worker reads them earlier.
  const ShardLayout& layout = window_.layout(topo_.role_index());
  auto* words = static_cast<std::int64_t*>(window_.control().base());
  for (std::size_t w = 0; w < first_pushes.size(); ++w)
    for (std::size_t b = 0; b < blocks_; ++b) {
      words[layout.pushed_word(static_cast<int>(w), static_cast<int>(b)) / 8] = first_pushes[w];
      words[layout.taken_word(static_cast<int>(w), static_cast<int>(b)) / 8] = first_pushes[w];
    }
  start_sequence({});
}

void RelaxedServer::read(std::vector<std::int64_t>& words) {
  words.resize(tables() + 2 * static_cast<std::size_t>(workers_) * blocks_);
  const int me = topo_.role_index();
  control_.read(me, window_.layout(me).departed_word(), static_cast<int>(words.size()), words.data());
}

// writing = 1 is complete at this PS before readers is read (each control call flushes); a
// worker adds itself to readers before it reads writing. Of two such pairs one sees the other:
// either the PS sees the reader (and waits), or the reader sees writing = 1 (and backs off).
void RelaxedServer::lock(int block) {
  const int me = topo_.role_index();
  const ShardLayout& layout = window_.layout(me);
  control_.write(me, layout.writing_word(block), 1);
  comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
  std::int64_t readers = 0;
  for (control_.read(me, layout.readers_word(block), 1, &readers); readers != 0;
       control_.read(me, layout.readers_word(block), 1, &readers))
    if (!waiter.pause())
      throw hang_error(waiter.waited_seconds(),
                       str(" to write block ", block, ", which ", readers, " worker read(s) still hold"),
                       "a worker is dead, stopped or stuck in the middle of a pull");
  sync_local_memory();  // the slots' pushes and the workers' finished Gets, before the loads and stores
}

// The version first, then the unlock: a reader that sees writing = 0 reads the new version.
void RelaxedServer::publish_and_unlock(int block, std::int64_t version) {
  sync_local_memory();  // the stores to the parameters, before any later Get
  const int me = topo_.role_index();
  const ShardLayout& layout = window_.layout(me);
  control_.write(me, layout.version_word(block), version);
  control_.write(me, layout.writing_word(block), 0);
}

void RelaxedServer::set_stop_at(std::int64_t step) {
  DRT_ASSERT(topo_.role_index() == 0, "only PS 0 decides where the workers stop");
  control_.write(0, window_.layout(0).stop_at_word(), step);
}

const RelaxedServer::CutWords& RelaxedServer::cuts(const std::vector<std::int64_t>& own_words, std::int64_t handled) {
  const auto W = static_cast<std::size_t>(workers_);
  std::vector<std::int64_t> remote;
  const std::int64_t* at = own_words.data() + 3;  // cut_request in a read() of PS 0's own words
  if (topo_.role_index() != 0) {
    const double now = now_seconds();
    if (cuts_.request <= handled && cuts_read_at_ >= 0.0 && now - cuts_read_at_ < 1e-3) return cuts_;
    cuts_read_at_ = now;
    remote.resize(2 + 2 * W);
    control_.read(0, window_.layout(0).cut_request_word(), static_cast<int>(remote.size()), remote.data());
    at = remote.data();
  }
  cuts_.request = at[0], cuts_.release = at[1];
  cuts_.ack.assign(at + 2, at + 2 + W);
  cuts_.pos.assign(at + 2 + W, at + 2 + 2 * W);
  return cuts_;
}

void RelaxedServer::request_cut(std::int64_t number) {
  DRT_ASSERT(topo_.role_index() == 0, "only PS 0 asks for cuts");
  control_.write(0, window_.layout(0).cut_request_word(), number);
}

void RelaxedServer::release_cut(std::int64_t number) {
  DRT_ASSERT(topo_.role_index() == 0, "only PS 0 releases cuts");
  control_.write(0, window_.layout(0).cut_release_word(), number);
}

void RelaxedServer::take(int worker, int block, std::int64_t push) {
  const int me = topo_.role_index();
  control_.write(me, window_.layout(me).taken_word(worker, block), push);
}

void RelaxedServer::publish_all(std::int64_t version) {
  sync_local_memory();
  const int me = topo_.role_index();
  std::vector<MPI_Aint> words;
  for (std::size_t b = 0; b < blocks_; ++b) words.push_back(window_.layout(me).version_word(static_cast<int>(b)));
  control_.write(me, words, version);
}

HangError RelaxedServer::hang(const std::vector<int>& missing, double waited, const std::string& what) {
  std::vector<std::string> names;
  names.reserve(missing.size());
  for (int w : missing) names.push_back(topo_.worker_name(w));
  return hang_error(waited, str(" (--sync-mode ", to_string(config_.mode), ") for ", what, " from ", join(names, ", ")),
                    "that worker is dead, stopped or stuck");
}

}  // namespace drt::ps
