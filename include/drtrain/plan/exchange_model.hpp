// An alpha-beta model of one synchronous exchange step: drtrain's PS exchange (passive or fence,
// any placement, PS count and block size) and a ring allreduce of the same gradient, on a
// two-level fat tree of nodes with one link each. It is what drtrain-plan prints, and the bench's
// link floor (the busiest node's bytes / link rate) is computed here too. The terms, their
// derivation and the calibration against the emulated cluster and SimGrid: docs/PLANNER.md.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace drt::plan {

// Where the ranks are: the node of every PS and of every worker (nodes are 0..nodes-1).
struct Placement {
  int nodes = 0;
  std::vector<int> ps_node;
  std::vector<int> worker_node;

  // PS on nodes 0..ps-1, one worker on each of the next `workers` nodes (--ps-placement first, one
  // rank per node).
  static Placement dedicated(int ps, int workers);
  // A worker on every node, and a PS besides on each of the first `ps` nodes (--ps-placement per-node).
  static Placement colocated(int nodes, int ps);
  int num_ps() const { return static_cast<int>(ps_node.size()); }
  int num_workers() const { return static_cast<int>(worker_node.size()); }
};

// The network: every node's link (per direction), the one-way latency between two nodes of a leaf
// switch, and the fat tree's leaves (nodes per leaf, uplinks per leaf = leaf size / oversub).
struct Network {
  double gbit = 25.0;               // link rate per direction, Gbit/s
  double latency_us = 4.0;          // one-way small-message latency, node to node (MPI's, not the wire's)
  int leaf_size = 0;                // nodes per leaf switch; 0: one switch for all (no uplinks)
  double oversub = 1.0;             // leaf oversubscription: 1 = full bisection
  double payload_efficiency = 1.0;  // payload bytes / wire bytes (TCP over 1500-byte Ethernet: 0.956)
  double bytes_per_s() const { return gbit * 1e9 / 8.0 * payload_efficiency; }
};

// RMA calls a worker makes per block under passive: the push, its flush, the announcement (control
// words), the pull.
constexpr double kPassiveOpsPerBlock = 4;

// Costs of the software, not the wire. Fitted to the emulated cluster and SimGrid (docs/PLANNER.md
// records the fit); every field can be set from drtrain-plan's command line.
struct Costs {
  double rma_op_us = 4.0;          // a worker's own time per RMA call (CPU, not wire); passive makes
                                   // kPassiveOpsPerBlock of them per block, fence one
  double ctrl_message_us = 0.5;    // a PS's time to absorb one control-word update (2 per worker and block)
  double apply_gbs = 6.0;          // the PS's optimizer apply, GB/s of shard (SGD + zeroing the sum)
  double fence_rounds = 3;         // MPI_Win_fence calls per step (each a barrier: 2 log2(ranks) latencies)
  double shared_cores = 0;         // > 0: every node shares these cores (an emulated cluster on one host)
  double tcp_cpu_ns_per_byte = 0;  // with shared_cores: CPU time per byte sent or received over TCP
  bool rma_blocking = false;       // each RMA call completes before it returns (SimGrid's SMPI): a
                                   // worker's calls and their transfers add up instead of overlapping
  double cpu_serial_fraction = 0;  // with shared_cores: the share of the lesser of CPU and link time
                                   // that does not overlap the greater (a roofline would say 0)
};

enum class Scheme { passive, fence, allreduce };
const char* scheme_name(Scheme scheme);

// One exchange step of a gradient of `floats` float32 values.
struct Step {
  std::size_t floats = 0;
  double wire_bytes_per_value = 4.0;                  // 2 with --wire bf16
  std::size_t chunk_bytes = std::size_t{128} * 1024;  // the PS block (--rma-chunk-kib)
};

// A predicted time and what it is made of (seconds). `total` is what the planner compares.
struct Prediction {
  double total = 0;
  double link = 0;      // the busiest node's (or leaf uplink's) bytes / rate
  double latency = 0;   // latency terms: pipeline fill, fences, ring hops
  double software = 0;  // per-block work on a worker, control words at the busiest PS
  double apply = 0;     // the optimizer apply not hidden behind the transfer
  double cpu = 0;       // with Costs::shared_cores: every rank's TCP bytes / the shared cores
  std::string bound;    // what binds: "link", "leaf uplinks", "PS control words", "apply", "CPU", "latency"
};

// The busiest node's bytes in or out per step (the max over nodes and directions), when every
// worker pushes its part of every PS shard and pulls it back; ranks of one node exchange nothing.
double busiest_node_bytes(const Placement& where, const std::vector<std::size_t>& shard_floats, double bytes_per_value);
// The link floor, seconds: busiest_node_bytes (float32) / the raw link rate.
double link_floor_s(const Placement& where, std::size_t floats, double gbit);
// A ring allreduce's floor over the workers, seconds: 2 G (W - 1) / W / the raw link rate.
double ring_floor_s(int workers, std::size_t floats, double gbit);

// Shard sizes as ShardPlan::balanced makes them.
std::vector<std::size_t> balanced_shards(std::size_t floats, int num_ps);

Prediction predict(Scheme scheme, const Placement& where, const Network& net, const Costs& costs, const Step& step);

}  // namespace drt::plan
