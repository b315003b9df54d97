#include "drtrain/comm/topology.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/core/choices.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::comm {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  parts.reserve(ranks.size());
  for (int r : ranks) parts.push_back(std::to_string(r));
  return "[" + join(parts, " ") + "]";
}

// Index of each rank's node, numbered by the lowest world rank on each node.
std::vector<int> gather_node_indices(const Comm& world, const Comm& node) {
  int leader = world.rank();
  DRT_MPI_CHECK(MPI_Bcast(&leader, 1, MPI_INT, 0, node.get()));
  std::vector<int> leaders(static_cast<std::size_t>(world.size()));
  DRT_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world.get()));
  std::vector<int> distinct = leaders;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<int> node_of_rank;
  node_of_rank.reserve(leaders.size());
  for (int l : leaders)
    node_of_rank.push_back(static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), l) - distinct.begin()));
  return node_of_rank;
}

// Every rank's host name (MPI_Get_processor_name), for messages that must say where a rank runs.
std::vector<std::string> gather_host_names(const Comm& world) {
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  DRT_MPI_CHECK(MPI_Get_processor_name(mine, &length));
  std::vector<char> all(static_cast<std::size_t>(world.size()) * MPI_MAX_PROCESSOR_NAME);
  DRT_MPI_CHECK(
      MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, world.get()));
  std::vector<std::string> names;
  for (int r = 0; r < world.size(); ++r) {
    const char* name = all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    names.emplace_back(name, strnlen(name, MPI_MAX_PROCESSOR_NAME));
  }
  return names;
}

}  // namespace

namespace {
constexpr Choice<Placement> kPlacements[] = {{Placement::kFirst, "first"}, {Placement::kPerNode, "per-node"}};
}  // namespace

Placement parse_placement(const std::string& text) { return parse_choice(text, kPlacements, "--ps-placement"); }
std::string to_string(Placement placement) { return choice_name(placement, kPlacements); }

RolePlan plan_roles(const std::vector<int>& node_of_rank, int num_ps, Placement placement) {
  const int world = static_cast<int>(node_of_rank.size());
  const int nodes = world == 0 ? 0 : *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
  if (num_ps < 1)
    throw ConfigError(str("--num-ps must be at least 1 (got ", num_ps, "): drtrain keeps the parameters on PS ranks"));
  if (world == 1)
    throw ConfigError("the job has 1 rank; drtrain needs at least 2 (a PS and a worker). If more were started, "
                      "the launcher and the MPI library do not work together (pass --expect-ranks N to check)");
  if (num_ps >= world)
    throw ConfigError(str("--num-ps ", num_ps, " leaves no worker: the job has ", world,
                          " rank(s) and needs at least one worker besides the PS ranks; pass "
                          "--num-ps ",
                          std::max(1, world - 1),
                          " or fewer, or start more ranks "
                          "(e.g. mpirun -n ",
                          num_ps + 1, ")"));
  std::vector<bool> is_ps(static_cast<std::size_t>(world), false);
  if (placement == Placement::kFirst) {
    for (int r = 0; r < num_ps; ++r) is_ps[static_cast<std::size_t>(r)] = true;
  } else {
    if (num_ps > nodes)
      throw ConfigError(str("--ps-placement per-node puts one PS on each of the first --num-ps "
                            "nodes, but --num-ps is ",
                            num_ps, " and the job spans ", nodes, " node(s); pass --num-ps ", nodes,
                            " or fewer, or --ps-placement "
                            "first"));
    std::set<int> nodes_with_ps;
    for (int r = 0; r < world; ++r) {
      const int node = node_of_rank[static_cast<std::size_t>(r)];
      if (node < num_ps && nodes_with_ps.insert(node).second) is_ps[static_cast<std::size_t>(r)] = true;
    }
  }
  RolePlan plan;
  for (int r = 0; r < world; ++r) {
    const bool ps = is_ps[static_cast<std::size_t>(r)];
    plan.role_of_rank.push_back(ps ? Role::kPs : Role::kWorker);
    (ps ? plan.ps_ranks : plan.worker_ranks).push_back(r);
  }
  return plan;
}

Topology Topology::create(int num_ps, Placement placement, int expect_ranks) {
  Topology topo;
  topo.world_ = Comm::world();
  if (expect_ranks > 0 && topo.world_.size() != expect_ranks)
    throw ConfigError(str("MPI reports ", topo.world_.size(), " rank(s) but --expect-ranks is ", expect_ranks,
                          ": the launcher and the MPI library do not work together (e.g. MPICH under srun "
                          "--mpi=pmix starts single-rank jobs). Use srun --mpi=pmix with Open MPI and srun "
                          "--mpi=pmi2 with MPICH, or the MPI library's own mpiexec"));
  topo.node_comm_ = topo.world_.split_shared();
  const std::vector<int> node_of_rank = gather_node_indices(topo.world_, topo.node_comm_);
  topo.num_nodes_ = *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
  topo.node_index_ = node_of_rank[static_cast<std::size_t>(topo.world_.rank())];
  topo.host_of_rank_ = gather_host_names(topo.world_);
  topo.plan_ = plan_roles(node_of_rank, num_ps, placement);

  const int me = topo.world_.rank();
  topo.role_ = topo.plan_.role_of_rank[static_cast<std::size_t>(me)];
  const auto& mine = topo.is_ps() ? topo.plan_.ps_ranks : topo.plan_.worker_ranks;
  topo.role_index_ = static_cast<int>(std::find(mine.begin(), mine.end(), me) - mine.begin());
  topo.role_comm_ = topo.world_.split(topo.is_ps() ? 0 : 1, me);
  return topo;
}

std::string Topology::rank_place(int world_rank) const {
  if (num_nodes_ == 1) return str("world rank ", world_rank);
  return str("world rank ", world_rank, " on ", host_of_rank_[static_cast<std::size_t>(world_rank)]);
}

std::string Topology::ps_name(int ps) const {
  return str("PS ", ps, " (", rank_place(plan_.ps_ranks[static_cast<std::size_t>(ps)]), ")");
}

std::string Topology::worker_name(int worker) const {
  return str("worker ", worker, " (", rank_place(plan_.worker_ranks[static_cast<std::size_t>(worker)]), ")");
}

std::string Topology::rank_name(int world_rank) const {
  for (std::size_t p = 0; p < plan_.ps_ranks.size(); ++p)
    if (plan_.ps_ranks[p] == world_rank) return ps_name(static_cast<int>(p));
  for (std::size_t w = 0; w < plan_.worker_ranks.size(); ++w)
    if (plan_.worker_ranks[w] == world_rank) return worker_name(static_cast<int>(w));
  return str("world rank ", world_rank);
}

std::string Topology::describe() const {
  return str(world_size(), " rank(s) on ", num_nodes_, " node(s): PS ", rank_list(plan_.ps_ranks), ", workers ",
             rank_list(plan_.worker_ranks), " (chief = world rank ", plan_.worker_ranks.front(), ")");
}

}  // namespace drt::comm
