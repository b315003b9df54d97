// SyncProtocol (internal): the synchronisation half of the exchange, one implementation per
// --rma-sync scheme. WorkerExchange issues the data movement (MPI_Accumulate / MPI_Put of
// gradients, MPI_Get of parameters) and ParameterServer applies the optimizer; this class makes
// the operations complete and visible and tells each side when the other is done, per block
// (see shard_window.hpp). Call sequences, with versions counted from 1 (the initial
// parameters) and t = steps done:
//
//   PS:      [zero windows, maybe restore a checkpoint] start({})  publish(all, 1)
//            { await_blocks(t+1) -> apply those blocks -> publish(them, t+2) }*  ... -> false
//   worker:  start(chief ? Put initial params : {})
//            { [Accumulate|Put block b] block_pushed(p, b, t+1) ... complete_push(t+1)
//              await_block(p, b, t+2) [Get block b] ... complete_pull() }*
//            depart()
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "drtrain/comm/topology.hpp"
#include "drtrain/ps/exchange_config.hpp"
#include "drtrain/ps/shard_window.hpp"

namespace drt::ps {

class SyncProtocol {
 public:
  virtual ~SyncProtocol() = default;

  // Both roles, collective. Orders the PS's local stores so far (zeroing the windows, restoring
  // a checkpoint) before any peer's access, then runs `upload` (the chief: MPI_Puts of the
  // initial parameters; empty elsewhere) and makes those Puts complete at the PS before
  // anyone proceeds.
  virtual void start(const std::function<void()>& upload) = 0;

  // Worker (--grad-push ordered): block until the previous worker has announced block `block`
  // of PS `ps` for push number `pushes`.
  virtual void await_predecessor(int ps, int block, std::int64_t pushes) = 0;
  // Worker: every gradient element of block `block` of PS `ps` for push number `pushes` has
  // been issued.
  virtual void block_pushed(int ps, int block, std::int64_t pushes) = 0;
  // Worker: every block of every PS has been pushed (and announced with block_pushed).
  virtual void complete_push(std::int64_t pushes) = 0;
  // Worker: block until block `block` of PS `ps` is published at version >= `version`.
  virtual void await_block(int ps, int block, std::int64_t version) = 0;
  // Worker, without blocking: is block `block` of PS `ps` published at version >= `version`?
  // Answers from what is known unless `refresh`, which reads the PS's versions once.
  virtual bool block_published(int ps, int block, std::int64_t version, bool refresh) = 0;
  // Worker: complete the Gets issued since the first await_block of this version.
  virtual void complete_pull() = 0;
  // Worker: locally complete the operations issued towards PS `ps` (origin buffers reusable).
  virtual void complete_local(int ps) = 0;
  // Worker: leave; the PS stops serving once every worker has departed.
  virtual void depart() = 0;

  // PS: wait until some blocks not yet `applied` have been pushed `pushes` times by every
  // worker and put them in `ready` (true), or until every worker has departed (false; only
  // when no block of this push has been applied).
  virtual bool await_blocks(std::int64_t pushes, const std::vector<bool>& applied, std::vector<int>& ready) = 0;
  // PS: the parameters of `blocks` are now version `version`; let the workers read them.
  virtual void publish(const std::vector<int>& blocks, std::int64_t version) = 0;
};

std::unique_ptr<SyncProtocol> make_sync_protocol(const comm::Topology& topo, ShardWindow& window,
                                                 const ExchangeConfig& config);

// The two implementations (passive_sync.cpp, fence_sync.cpp).
std::unique_ptr<SyncProtocol> make_passive_sync(const comm::Topology& topo, ShardWindow& window,
                                                const ExchangeConfig& config);
std::unique_ptr<SyncProtocol> make_fence_sync(const comm::Topology& topo, ShardWindow& window);

}  // namespace drt::ps
