// ExchangeConfig: how workers and PS ranks synchronise a step over MPI RMA.
#pragma once

#include <cstddef>
#include <string>

#include "drtrain/ps/shard_plan.hpp"

namespace drt::ps {

enum class RmaSync {
  // MPI_Win_lock_all once; pushes are flushed, then each worker sets its arrival word on the
  // PS; the PS polls (napping, comm/poll.hpp) and publishes a version word that workers poll
  // before MPI_Get. Only the ranks that exchange data wait for each other; waits time out.
  kPassive,
  // MPI_Win_fence around the push, apply and pull epochs: three fences per step, collective
  // over all ranks; MPI's fence (a barrier) spins, and cannot time out.
  kFence,
};
RmaSync parse_rma_sync(const std::string& text);  // ConfigError lists the choices
std::string to_string(RmaSync sync);

// How workers deliver gradients into a PS's memory.
enum class GradPush {
  // MPI_Accumulate(MPI_SUM) into one sum per shard, in any order; the PS zeroes the sum after
  // applying it. The float sum depends on arrival order.
  kAccumulate,
  // The same sum, filled in worker order block by block: worker 0 MPI_Puts, worker w > 0
  // MPI_Accumulates once worker w-1 has announced the block. Bitwise reproducible; nothing to
  // zero and one read less per step; a worker may wait for its predecessor. --rma-sync passive.
  kOrdered,
  // --deterministic: each worker MPI_Puts into its own slot and the PS sums the slots in worker
  // order. Bitwise reproducible, workers never wait for each other; W x gradient memory per PS.
  kSlots,
};
GradPush parse_grad_push(const std::string& text);  // ConfigError lists the choices
std::string to_string(GradPush push);

// The number format of what crosses the network (docs/EXCHANGE.md, "The wire format").
enum class Wire {
  kFp32,  // gradients and parameters as float32
  // Gradients and parameters as bfloat16 (round to nearest even), half the bytes. Workers Put
  // into per-worker slots (MPI has no bf16 sum) that the PS sums in float32, in worker order;
  // the PS keeps its float32 master parameters and optimizer state and publishes a bf16 copy
  // next to them, which workers pull and compute from (in float32).
  kBf16,
};
Wire parse_wire(const std::string& text);  // ConfigError lists the choices
std::string to_string(Wire wire);

// How the flat parameter space is cut over the PS (ps/shard_plan.hpp, docs/ARCHITECTURE.md,
// "The flat parameter space and the shard plan").
enum class PlanKind {
  kContiguous,  // one contiguous range per PS
  kStriped,     // spans of one RMA block dealt round-robin: every large layer on every PS
};
PlanKind parse_plan_kind(const std::string& text);  // ConfigError lists the choices
std::string to_string(PlanKind kind);

// When the PS applies gradients (docs/RELAXED_MODES.md, "Relaxed synchronisation"). Every mode
// but kSync pushes into per-worker slots and reads parameters under a per-block read lock.
enum class SyncKind {
  kSync,    // one update per step with the mean of all W workers' gradients (bitwise reproducible
            // with --deterministic)
  kBackup,  // step t is applied once W - B workers' gradients of step t are in (their mean); late
            // gradients of step t are dropped; a late worker skips to the newest step. backup:0
            // waits for every worker: sync's results (bitwise --deterministic's) by this protocol
  kSsp,     // each worker's gradient applied (scaled 1/W) as it arrives; a worker pushes step t
            // only once every worker has pushed step t - S
  kAsync,   // each worker's gradient applied (scaled 1/W) as it arrives; nobody waits for others
};
struct SyncMode {
  SyncKind kind = SyncKind::kSync;
  int bound = 0;  // backup: B (workers not waited for); ssp: S (steps a worker may lead)
  bool relaxed() const { return kind != SyncKind::kSync; }
  bool per_gradient() const { return kind == SyncKind::kSsp || kind == SyncKind::kAsync; }  // each gradient alone
  bool operator==(const SyncMode& o) const { return kind == o.kind && bound == o.bound; }
};
// "sync", "backup:B", "ssp:S", "async"; ConfigError with the forms otherwise.
SyncMode parse_sync_mode(const std::string& text);
std::string to_string(const SyncMode& mode);

// --lookahead under --sync-mode ssp:S and async (docs/RELAXED_MODES.md, "Staleness look-ahead"):
// with momentum SGD the PS publishes params - lr * k * momentum, where the parameters are
// expected to be when a gradient computed from them arrives (k updates later), instead of the
// parameters themselves. kAuto: k = the mean staleness the PS has measured so far (W - 1 before
// the first gradient), off with one worker; kOff: publish the parameters; kFixed: k as given.
struct Lookahead {
  enum class Kind { kAuto, kOff, kFixed } kind = Kind::kAuto;
  double k = 0.0;  // kFixed
  bool operator==(const Lookahead& o) const { return kind == o.kind && k == o.k; }
};
Lookahead parse_lookahead(const std::string& text);  // "auto", "off" or a number k > 0; ConfigError
std::string to_string(const Lookahead& lookahead);

struct ExchangeConfig {
  RmaSync sync = RmaSync::kPassive;
  SyncMode mode;                          // --sync-mode
  Lookahead lookahead;                    // --lookahead
  GradPush push = GradPush::kAccumulate;  // read it through grad_push()
  Wire wire = Wire::kFp32;
  PlanKind plan = PlanKind::kContiguous;  // --shard-plan
  bool deterministic = false;             // --deterministic: the same as push = kSlots
  // Largest RMA operation and synchronisation block; 0 = by layout (chunk_bytes_for).
  std::size_t chunk_bytes = 0;
  double hang_timeout_s = 300.0;  // passive waits give up after this
  int max_nap_us = 100;           // longest sleep between polls

  // bf16 on the wire and the relaxed modes always go into per-worker slots.
  GradPush grad_push() const {
    return deterministic || wire == Wire::kBf16 || mode.relaxed() ? GradPush::kSlots : push;
  }
  // Bytes per element of the gradients pushed and the parameters pulled.
  std::size_t wire_bytes() const { return wire == Wire::kBf16 ? 2 : 4; }
  // The chunk for a job on `num_nodes` nodes: chunk_bytes if set, else 1 MiB on one node (shared
  // memory: fewer blocks, fewer control words) and 128 KiB across nodes (a block's first bytes
  // reach the PS, are applied and come back sooner, so push and pull overlap on the links; the
  // choice measured best in bench/RESULTS.md, "The exchange across nodes").
  std::size_t chunk_bytes_for(int num_nodes) const {
    if (chunk_bytes != 0) return chunk_bytes;
    return num_nodes > 1 ? std::size_t{128} << 10 : std::size_t{1} << 20;
  }
  bool per_worker_slots() const { return grad_push() == GradPush::kSlots; }
  // The shard plan of `total` elements over `num_ps` PS for a job on `num_nodes` nodes:
  // balanced, or striped in spans of whole blocks (chunk_bytes_for: one block, or more when the
  // plan would have over ShardPlan::kMaxStripedSpans spans), so that every block is one
  // contiguous range of the flat space; at most the balanced shard's size, so every PS gets one.
  ShardPlan shard_plan_for(std::size_t total, int num_ps, int num_nodes) const;
  // Whether the PS publishes looked-ahead parameters: ssp/async with SGD with momentum, and
  // --lookahead auto with more than one worker, or a fixed k.
  bool lookahead_active(bool momentum_sgd, int num_workers) const;
  void validate() const;  // ConfigError naming the flag
  // What needs the number of workers: backup:B needs B < W. ConfigError naming the flag.
  void validate_for(int num_workers) const;
  std::string describe(int num_nodes) const;
};

}  // namespace drt::ps
