// The alpha-beta model of one exchange step (docs/PLANNER.md derives each term).
//
// A pipelined exchange is as slow as its slowest stage plus the time to fill the pipeline:
//   passive = max(busiest node link, busiest leaf uplinks, a worker's own path, the busiest PS's
//                 control words, the busiest PS's apply, shared CPU) + k min(link, CPU) + fill
//             (k and the CPU term only where nodes share cores: the emulated cluster)
//   fence   = push phase + apply + pull phase + fence barriers (nothing overlaps)
//   ring    = 2 (W-1) hops of G/W bytes and one latency each (reduce-scatter, then allgather)
#include "drtrain/plan/exchange_model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "drtrain/ps/shard_plan.hpp"

namespace drt::plan {
namespace {

// Bytes per node and direction for one half of the exchange (push: workers -> PS).
struct Traffic {
  std::vector<double> out, in;
};

Traffic push_traffic(const Placement& where, const std::vector<std::size_t>& shard_floats, double bytes_per_value) {
  Traffic t{std::vector<double>(static_cast<std::size_t>(where.nodes), 0.0),
            std::vector<double>(static_cast<std::size_t>(where.nodes), 0.0)};
  for (int wn : where.worker_node)
    for (std::size_t p = 0; p < shard_floats.size(); ++p) {
      const int pn = where.ps_node[p];
      if (pn == wn) continue;
      const double bytes = bytes_per_value * static_cast<double>(shard_floats[p]);
      t.out[static_cast<std::size_t>(wn)] += bytes;
      t.in[static_cast<std::size_t>(pn)] += bytes;
    }
  return t;
}

double busiest(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max({m, a[i], b[i]});
  return m;
}

// The busiest leaf's bytes through its uplinks in one direction, / the uplinks' rate; 0 without leaves.
double leaf_uplink_s(const Placement& where, const std::vector<std::size_t>& shards, double bpv, const Network& net,
                     bool both_directions) {
  if (net.leaf_size <= 0 || where.nodes <= net.leaf_size) return 0.0;
  const int leaves = (where.nodes + net.leaf_size - 1) / net.leaf_size;
  std::vector<double> up(static_cast<std::size_t>(leaves), 0.0), down = up;
  for (int wn : where.worker_node)
    for (std::size_t p = 0; p < shards.size(); ++p) {
      const int wl = wn / net.leaf_size, pl = where.ps_node[p] / net.leaf_size;
      if (wl == pl) continue;
      const double bytes = bpv * static_cast<double>(shards[p]);
      up[static_cast<std::size_t>(wl)] += bytes;  // push leaves the worker's leaf
      down[static_cast<std::size_t>(pl)] += bytes;
      if (both_directions) {  // the pull comes back the other way
        up[static_cast<std::size_t>(pl)] += bytes;
        down[static_cast<std::size_t>(wl)] += bytes;
      }
    }
  const double uplinks = std::max(1.0, std::round(net.leaf_size / net.oversub));
  return busiest(up, down) / (uplinks * net.bytes_per_s());
}

std::size_t blocks_of(std::size_t floats, std::size_t chunk_bytes) {
  const std::size_t per_block = std::max<std::size_t>(1, chunk_bytes / 4);
  return (floats + per_block - 1) / per_block;
}

// A barrier's latency (dissemination: ceil(log2 n) rounds of one message each way).
double barrier_s(int ranks, double alpha) {
  return ranks <= 1 ? 0.0 : 2.0 * std::ceil(std::log2(static_cast<double>(ranks))) * alpha;
}

// With Costs::shared_cores: every byte a rank sends or receives over TCP costs CPU, and all nodes
// share the same cores (the emulated cluster). Ranks of one node exchange nothing over TCP.
double shared_cpu_s(double tcp_bytes, const Costs& costs) {
  if (costs.shared_cores <= 0) return 0.0;
  return tcp_bytes * costs.tcp_cpu_ns_per_byte * 1e-9 / costs.shared_cores;
}

void name_bound(Prediction& p, const std::vector<std::pair<double, const char*>>& terms) {
  double best = -1.0;
  for (const auto& [t, name] : terms)
    if (t > best) {
      best = t;
      p.bound = name;
    }
}

Prediction predict_passive(const Placement& where, const Network& net, const Costs& costs, const Step& step) {
  const std::vector<std::size_t> shards = balanced_shards(step.floats, where.num_ps());
  const double bpv = step.wire_bytes_per_value, beta = net.bytes_per_s(), alpha = net.latency_us * 1e-6;
  const Traffic push = push_traffic(where, shards, bpv);
  // Pull is the mirror of push: a node's bytes out in total = its push out + its PS' pull out.
  std::vector<double> out(push.out.size()), in(push.in.size());
  double tcp_bytes = 0.0;
  for (std::size_t n = 0; n < out.size(); ++n) {
    out[n] = push.out[n] + push.in[n];
    in[n] = push.in[n] + push.out[n];
    tcp_bytes += out[n] + in[n];
  }
  Prediction p;
  const double link = busiest(out, in) / beta;
  const double leaf = leaf_uplink_s(where, shards, bpv, net, true);
  p.link = std::max(link, leaf);
  // A worker's own path: its blocks one after another, each with its software overhead and the
  // flush's and the announcement's round trips, which the other PS' blocks in flight hide (the
  // worker visits the PS round-robin).
  const int num_ps = where.num_ps();
  std::size_t worker_blocks = 0, busiest_ps_blocks = 0, biggest_shard = 0;
  for (std::size_t s : shards) {
    worker_blocks += blocks_of(s, step.chunk_bytes);
    busiest_ps_blocks = std::max(busiest_ps_blocks, blocks_of(s, step.chunk_bytes));
    biggest_shard = std::max(biggest_shard, s);
  }
  const double round_trips = 4.0 * alpha / num_ps;
  const double worker_path =
      static_cast<double>(worker_blocks) * (kPassiveOpsPerBlock * costs.rma_op_us * 1e-6 + round_trips);
  // The busiest PS absorbs two control-word updates per worker and block (arrival, pushed[w][b]).
  const double ctrl = 2.0 * where.num_workers() * static_cast<double>(busiest_ps_blocks) * costs.ctrl_message_us * 1e-6;
  const double apply = 4.0 * static_cast<double>(biggest_shard) / (costs.apply_gbs * 1e9);
  p.cpu = shared_cpu_s(tcp_bytes, costs);
  p.software = std::max(worker_path, ctrl);
  p.apply = apply;
  // Filling the pipeline: the first block's push, its apply and its pull, each handshake a round trip.
  const double block = static_cast<double>(std::min(step.chunk_bytes, 4 * biggest_shard));
  p.latency = 2.0 * block * bpv / 4.0 / beta + block / (costs.apply_gbs * 1e9) + 6.0 * alpha;
  const double slowest = std::max({p.link, worker_path, ctrl, apply, p.cpu});
  p.total = slowest + costs.cpu_serial_fraction * std::min(p.link, p.cpu) + p.latency;
  name_bound(p, {{link, "link"},
                 {leaf, "leaf uplinks"},
                 {worker_path, "worker blocks"},
                 {ctrl, "PS control words"},
                 {apply, "apply"},
                 {p.cpu, "CPU"}});
  if (p.latency > slowest) p.bound = "latency";
  return p;
}

Prediction predict_fence(const Placement& where, const Network& net, const Costs& costs, const Step& step) {
  const std::vector<std::size_t> shards = balanced_shards(step.floats, where.num_ps());
  const double bpv = step.wire_bytes_per_value, beta = net.bytes_per_s(), alpha = net.latency_us * 1e-6;
  const Traffic push = push_traffic(where, shards, bpv);
  double tcp_bytes = 0.0;
  for (std::size_t n = 0; n < push.out.size(); ++n) tcp_bytes += push.out[n] + push.in[n];
  Prediction p;
  // Push and pull are separate epochs: each moves its bytes alone (the pull mirrors the push); a
  // worker issues one RMA operation per block of every shard in each, at its software cost.
  std::size_t worker_blocks = 0;
  for (std::size_t s : shards) worker_blocks += blocks_of(s, step.chunk_bytes);
  const double issue = static_cast<double>(worker_blocks) * costs.rma_op_us * 1e-6;
  const double wire = std::max(busiest(push.out, push.in) / beta, leaf_uplink_s(where, shards, bpv, net, false));
  const double phase = costs.rma_blocking ? wire + issue : std::max(wire, issue);
  const double phase_cpu = shared_cpu_s(tcp_bytes, costs);
  p.link = 2.0 * wire;
  p.cpu = 2.0 * phase_cpu;
  p.apply = 4.0 * static_cast<double>(*std::max_element(shards.begin(), shards.end())) / (costs.apply_gbs * 1e9);
  const int ranks = where.num_ps() + where.num_workers();
  p.latency = costs.fence_rounds * barrier_s(ranks, alpha);
  p.total =
      2.0 * (std::max(phase, phase_cpu) + costs.cpu_serial_fraction * std::min(phase, phase_cpu)) + p.apply + p.latency;
  p.software = 2.0 * issue;
  name_bound(p, {{wire, "link"},
                 {issue, "worker blocks"},
                 {phase_cpu, "CPU"},
                 {p.apply / 2, "apply"},
                 {p.latency / 2, "latency"}});
  return p;
}

Prediction predict_ring(const Placement& where, const Network& net, const Costs& costs, const Step& step) {
  const double w = where.num_workers();
  Prediction p;
  if (w < 2) return p;
  const double bytes = 4.0 * static_cast<double>(step.floats), beta = net.bytes_per_s(), alpha = net.latency_us * 1e-6;
  p.link = 2.0 * (w - 1.0) / w * bytes / beta;
  p.latency = 2.0 * (w - 1.0) * alpha;
  // Every worker sends and receives 2 (W-1)/W G over TCP.
  p.cpu = shared_cpu_s(w * 4.0 * (w - 1.0) / w * bytes, costs);
  p.total = std::max(p.link, p.cpu) + costs.cpu_serial_fraction * std::min(p.link, p.cpu) + p.latency;
  name_bound(p, {{p.link, "link"}, {p.cpu, "CPU"}, {p.latency, "latency"}});
  return p;
}

}  // namespace

Placement Placement::dedicated(int ps, int workers) {
  if (ps < 1 || workers < 1) throw std::invalid_argument("a dedicated placement needs at least one PS and one worker");
  Placement p;
  p.nodes = ps + workers;
  for (int i = 0; i < ps; ++i) p.ps_node.push_back(i);
  for (int i = 0; i < workers; ++i) p.worker_node.push_back(ps + i);
  return p;
}

Placement Placement::colocated(int nodes, int ps) {
  if (ps < 1 || ps > nodes) throw std::invalid_argument("a co-located placement needs 1 to `nodes` PS");
  Placement p;
  p.nodes = nodes;
  for (int i = 0; i < ps; ++i) p.ps_node.push_back(i);
  for (int i = 0; i < nodes; ++i) p.worker_node.push_back(i);
  return p;
}

const char* scheme_name(Scheme scheme) {
  switch (scheme) {
    case Scheme::passive: return "passive";
    case Scheme::fence: return "fence";
    case Scheme::allreduce: return "ring allreduce";
  }
  return "?";
}

std::vector<std::size_t> balanced_shards(std::size_t floats, int num_ps) {
  const ps::ShardPlan plan = ps::ShardPlan::balanced(floats, num_ps);
  std::vector<std::size_t> sizes(static_cast<std::size_t>(num_ps));
  for (int p = 0; p < num_ps; ++p) sizes[static_cast<std::size_t>(p)] = plan.shard_size(p);
  return sizes;
}

double busiest_node_bytes(const Placement& where, const std::vector<std::size_t>& shard_floats,
                          double bytes_per_value) {
  const Traffic push = push_traffic(where, shard_floats, bytes_per_value);
  double m = 0.0;
  for (std::size_t n = 0; n < push.out.size(); ++n) m = std::max(m, push.out[n] + push.in[n]);
  return m;  // per node: out = push out + pull out = push out + push in; in is the same sum
}

double link_floor_s(const Placement& where, std::size_t floats, double gbit) {
  return busiest_node_bytes(where, balanced_shards(floats, where.num_ps()), 4.0) * 8.0 / (gbit * 1e9);
}

double ring_floor_s(int workers, std::size_t floats, double gbit) {
  if (workers < 2) return 0.0;
  return 2.0 * 4.0 * static_cast<double>(floats) * (workers - 1.0) / workers * 8.0 / (gbit * 1e9);
}

Prediction predict(Scheme scheme, const Placement& where, const Network& net, const Costs& costs, const Step& step) {
  if (where.num_ps() < 1 || where.num_workers() < 1 || step.floats == 0)
    throw std::invalid_argument("predict: a placement with PS and workers and a non-empty gradient");
  switch (scheme) {
    case Scheme::passive: return predict_passive(where, net, costs, step);
    case Scheme::fence: return predict_fence(where, net, costs, step);
    case Scheme::allreduce: return predict_ring(where, net, costs, step);
  }
  return {};
}

}  // namespace drt::plan
