// Topology: which world ranks are parameter servers (PS) and which are workers, the
// communicators for each role and for each node, and the chief (worker 0).
//
// plan_roles() is the pure decision (tested without MPI); Topology::create() gathers node
// membership with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), applies plan_roles() and splits
// MPI_COMM_WORLD by role. Every rank reaches the same verdict from the same data, so a bad
// layout throws the same ConfigError on every rank before any window exists.
#pragma once

#include <string>
#include <vector>

#include "drtrain/comm/comm.hpp"

namespace drt::comm {

enum class Placement {
  kFirst,    // PS are world ranks 0..P-1 (dedicated PS ranks or nodes)
  kPerNode,  // one PS on each of the first P nodes (its lowest rank), co-located with workers
};
Placement parse_placement(const std::string& text);  // ConfigError lists the choices
std::string to_string(Placement placement);

enum class Role { kPs, kWorker };

struct RolePlan {
  std::vector<Role> role_of_rank;  // indexed by world rank
  std::vector<int> ps_ranks;       // world ranks of PS 0..P-1, ascending
  std::vector<int> worker_ranks;   // world ranks of workers 0..W-1, ascending; [0] is the chief
};

// node_of_rank[r] = index (0..nodes-1) of the node hosting world rank r.
RolePlan plan_roles(const std::vector<int>& node_of_rank, int num_ps, Placement placement);

class Topology {
 public:
  // Collective over MPI_COMM_WORLD. expect_ranks > 0: ConfigError unless the world has exactly
  // that many ranks (a launcher/MPI mismatch can start N singletons that each see 1 rank).
  static Topology create(int num_ps, Placement placement, int expect_ranks = 0);

  Role role() const { return role_; }
  bool is_ps() const { return role_ == Role::kPs; }
  bool is_worker() const { return role_ == Role::kWorker; }
  bool is_chief() const { return is_worker() && role_index_ == 0; }
  int world_rank() const { return world_.rank(); }
  int world_size() const { return world_.size(); }
  int num_ps() const { return static_cast<int>(plan_.ps_ranks.size()); }
  int num_workers() const { return static_cast<int>(plan_.worker_ranks.size()); }
  // Index within the rank's role: PS index on a PS, worker index on a worker.
  int role_index() const { return role_index_; }
  const std::vector<int>& ps_world_ranks() const { return plan_.ps_ranks; }
  const std::vector<int>& worker_world_ranks() const { return plan_.worker_ranks; }
  int num_nodes() const { return num_nodes_; }
  int node_index() const { return node_index_; }

  const Comm& world() const { return world_; }
  const Comm& role_comm() const { return role_comm_; }  // the PS comm or the worker comm
  const Comm& node_comm() const { return node_comm_; }  // ranks sharing this node's memory

  // "PS 1 (world rank 1)", "worker 0 (world rank 2)": how messages name ranks; on more than one
  // node with the host: "worker 1 (world rank 3 on node2)".
  std::string rank_place(int world_rank) const;
  std::string ps_name(int ps) const;
  std::string worker_name(int worker) const;
  std::string my_name() const { return is_ps() ? ps_name(role_index_) : worker_name(role_index_); }
  std::string rank_name(int world_rank) const;  // ps_name or worker_name of a world rank

  // One line per role, e.g. "4 ranks on 1 node: PS [0], workers [1 2 3] (chief 1)".
  std::string describe() const;

 private:
  Topology() = default;

  Comm world_;
  Comm node_comm_;
  Comm role_comm_;
  RolePlan plan_;
  std::vector<std::string> host_of_rank_;
  Role role_ = Role::kWorker;
  int role_index_ = -1;
  int num_nodes_ = 1;
  int node_index_ = 0;
};

}  // namespace drt::comm
