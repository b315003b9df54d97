// The exchange protocols (internal): one pair of classes per --rma-sync mode, each owning both
// the data movement (MPI_Accumulate / MPI_Put of gradients, MPI_Get of parameters) and the
// synchronisation that makes it complete and visible. WorkerExchange (the public worker API)
// validates and cuts requests into chunks; ParameterServer applies the optimizer; everything
// that touches a window goes through these classes.
//
//   passive (passive_protocol.cpp): MPI_Win_lock_all once; per-block arrival counters and
//            version words in the control window; waits poll with naps and time out.
//   fence   (fence_protocol.cpp):   MPI_Win_fence epochs around push, apply and pull.
//
// Call sequences, versions counted from 1 (the initial parameters), t = steps done:
//   PS:      [zero windows, maybe restore a checkpoint] start()
//            { await_blocks(t+1) -> apply those blocks -> publish(them, t+2) }*  ... -> false
//   worker:  start(chief ? initial params : null)
//            { push(chunks)... finish_push(t+1)  pull(chunks)... complete_pull() }*  depart()
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "drtrain/comm/topology.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/ps/exchange_config.hpp"
#include "drtrain/ps/shard_window.hpp"
#include "drtrain/ps/worker_exchange.hpp"

namespace drt::ps {

// One RMA operation: `count` elements from flat index offset + at, inside one block of one PS.
// Gradient and parameter buffers hold wire elements (ShardLayout::wire_bytes(): float32, or bf16
// bits under --wire bf16); the chief's upload is always float32.
struct Chunk {
  int ps;
  int block;
  std::size_t shard_element;  // first element, relative to the PS's shard
  std::size_t at;             // first element, relative to the caller's buffer
  int count;
  bool completes_block;  // push: the block's last elements of this step
};

class WorkerProtocol {
 public:
  virtual ~WorkerProtocol() = default;

  // Collective with ServerProtocol::start(). Orders the PS's local stores so far (zeroing,
  // restore) before any access, then the chief (initial != null) uploads the parameters of
  // `all` chunks and they complete at the PS before anyone proceeds.
  virtual void start(const float* initial, const std::vector<Chunk>& all) = 0;
  // Gets to issue during a push: the chunks of `params` not yet pulled (moved from `left` to
  // `issued` as they go out).
  struct EarlyPull {
    void* params;
    std::vector<Chunk>* left;
    std::vector<Chunk>* issued;
  };
  // Issues the gradient chunks of push number `pushes` (completing any pull of an older version
  // still open) and announces blocks as they complete; may return before the data has left (see
  // complete_local). With `early` (passive): after each announcement, also Gets the chunks in
  // early->left whose blocks are already published at version pushes + 1 (completed by
  // complete_pull()); fence ignores it.
  virtual void push(const void* grad, const std::vector<Chunk>& chunks, std::int64_t pushes,
                    EarlyPull* early = nullptr) = 0;
  // Returns once the buffers of the pushes to `targets` may be reused.
  virtual void complete_local(const std::vector<int>& targets) = 0;
  // Every chunk of push `pushes` has been issued: announce what is left.
  virtual void finish_push(std::int64_t pushes) = 0;
  // Issues Gets of `chunks` at version `version` (waiting for each block's publication).
  virtual void pull(void* params, std::vector<Chunk> chunks, std::int64_t version) = 0;
  // Whether every block of `chunks` is published at `version` (reads the PS' version words; a
  // pull of them would not wait). Fence: always true (the pull fence does the waiting).
  virtual bool published(const std::vector<Chunk>& chunks, std::int64_t version) = 0;
  // The Gets issued since the last completion are in the caller's buffers.
  virtual void complete_pull() = 0;
  // A whole step: push(push_chunks), finish_push(pushes), pull(pull_chunks, pushes + 1) and
  // complete_pull(), with as much overlap as the mode allows (passive: Gets of blocks already
  // published go out while later blocks are still being pushed, so both directions of the
  // links carry data at once).
  virtual void step(const void* grad, const std::vector<Chunk>& push_chunks, void* params,
                    std::vector<Chunk> pull_chunks, std::int64_t pushes) = 0;
  // Leaves the exchange; the PS stop serving once every worker has left.
  virtual void depart() = 0;
  // Relaxed modes: the oldest block version the last pull read (backup: a worker that finds
  // newer parameters than its step skips to them); sync: 0.
  virtual std::int64_t pulled_version() const { return 0; }
  // ssp: the most steps this worker has been ahead of the slowest one when it pushed.
  virtual std::int64_t max_lead() const { return 0; }
  // Relaxed modes (passive only; fence has none): raises PS 0's stop request to `signal`; reads
  // {the request, the step of this run every worker stops before (0: not decided yet)}.
  virtual void request_stop(int /*signal*/) { DRT_ASSERT(false, "only the relaxed modes stop through PS 0's words"); }
  virtual RelaxedWords relaxed_words() {
    DRT_ASSERT(false, "only the relaxed modes stop through PS 0's words");
    return {};
  }
  // ssp/async, at a step boundary after `pushes` pushes: whether this worker may stop at a cut
  // (WorkerExchange::can_pause_at_cut).
  virtual bool can_pause_at_cut(std::int64_t /*pushes*/) { return true; }
  // ssp/async: this worker stopped at cut `cut` before step `position` (WorkerExchange::ack_cut).
  virtual void ack_cut(std::int64_t /*cut*/, std::int64_t /*position*/) {
    DRT_ASSERT(false, "only --sync-mode ssp/async have cuts");
  }

  // Reads `count` consecutive control words of PS `ps` from `word` (atomically each, flushed).
  virtual void read_words(int ps, MPI_Aint word, int count, std::int64_t* out) = 0;

  // Seconds spent waiting for the PS (publication, a predecessor, the pull fence) since the
  // last call.
  double take_wait_seconds() {
    const double s = wait_s_;
    wait_s_ = 0.0;
    return s;
  }

 protected:
  double wait_s_ = 0.0;
};

class ServerProtocol {
 public:
  virtual ~ServerProtocol() = default;

  // Collective with WorkerProtocol::start(); afterwards the PS publishes version 1.
  virtual void start() = 0;
  // Waits until some blocks not yet `applied` have been pushed `pushes` times by every worker
  // and puts them in `ready` (true), or until every worker has departed (false; only when no
  // block of this push has been applied).
  virtual bool await_blocks(std::int64_t pushes, const std::vector<bool>& applied, std::vector<int>& ready) = 0;
  // The parameters of `blocks` are now version `version`; let the workers read them.
  virtual void publish(const std::vector<int>& blocks, std::int64_t version) = 0;
  // Sets this PS's control words from `word` on to `values` (MPI_REPLACE, flushed).
  virtual void write_words(MPI_Aint word, const std::vector<std::int64_t>& values) = 0;
  // Reads `count` consecutive control words of PS `ps` from `word` (atomically each, flushed).
  virtual void read_words(int ps, MPI_Aint word, int count, std::int64_t* out) = 0;
};

std::unique_ptr<WorkerProtocol> make_worker_protocol(const comm::Topology& topo, ShardWindow& window,
                                                     const ExchangeConfig& config);
std::unique_ptr<ServerProtocol> make_server_protocol(const comm::Topology& topo, ShardWindow& window,
                                                     const ExchangeConfig& config);

// The implementations (passive_protocol.cpp, fence_protocol.cpp).
std::unique_ptr<WorkerProtocol> make_passive_worker(const comm::Topology& topo, ShardWindow& window,
                                                    const ExchangeConfig& config);
std::unique_ptr<ServerProtocol> make_passive_server(const comm::Topology& topo, ShardWindow& window,
                                                    const ExchangeConfig& config);
std::unique_ptr<WorkerProtocol> make_fence_worker(const comm::Topology& topo, ShardWindow& window,
                                                  const ExchangeConfig& config);
std::unique_ptr<ServerProtocol> make_fence_server(const comm::Topology& topo, ShardWindow& window,
                                                  const ExchangeConfig& config);

// Shared by both: the MPI operation that delivers a gradient chunk (MPI_Put into the worker's
// slot, or the ordered push's worker 0; MPI_Accumulate(MPI_SUM) into the sum otherwise).
void issue_gradient(const ShardWindow& window, const ExchangeConfig& config, int worker, const void* grad,
                    const Chunk& c);
// The chief's MPI_Puts of the initial parameters.
void issue_upload(const ShardWindow& window, const float* initial, const std::vector<Chunk>& all);
// The MPI datatype of a wire element.
MPI_Datatype wire_type(const ShardLayout& layout);
// MPI_Gets of parameter chunks (ShardLayout::wire_params); with `requests`, MPI_Rgets (passive target only) whose
// requests are appended there. Request-based Gets leave at once on every path (osc/pt2pt would otherwise hold a small
// Get request in its send buffer until the next flush), and can be waited on with MPI_Testall and naps instead of a
// flush that spins.
void issue_gets(const ShardWindow& window, void* params, std::vector<Chunk>::const_iterator begin,
                std::vector<Chunk>::const_iterator end, std::vector<MPI_Request>* requests = nullptr);

}  // namespace drt::ps
