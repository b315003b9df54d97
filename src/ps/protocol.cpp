#include "protocol.hpp"

#include "drtrain/comm/mpi_check.hpp"

namespace drt::ps {

std::unique_ptr<WorkerProtocol> make_worker_protocol(const comm::Topology& topo, ShardWindow& window,
                                                     const ExchangeConfig& config) {
  if (config.sync == RmaSync::kFence) return make_fence_worker(topo, window, config);
  return make_passive_worker(topo, window, config);
}

std::unique_ptr<ServerProtocol> make_server_protocol(const comm::Topology& topo, ShardWindow& window,
                                                     const ExchangeConfig& config) {
  if (config.sync == RmaSync::kFence) return make_fence_server(topo, window, config);
  return make_passive_server(topo, window, config);
}

MPI_Datatype wire_type(const ShardLayout& layout) { return layout.wire_bytes() == 2 ? MPI_UINT16_T : MPI_FLOAT; }

void issue_gradient(const ShardWindow& window, const ExchangeConfig& config, int worker, const void* grad,
                    const Chunk& c) {
  const ShardLayout& layout = window.layout(c.ps);
  const WindowSpot spot = layout.grad(worker, c.shard_element);
  const MPI_Win win = window.data(spot.window);
  const MPI_Datatype type = wire_type(layout);
  const void* from = static_cast<const char*>(grad) + c.at * layout.wire_bytes();
  const bool put = config.per_worker_slots() || (config.grad_push() == GradPush::kOrdered && worker == 0);
  if (put) DRT_MPI_CHECK(MPI_Put(from, c.count, type, window.target(c.ps), spot.disp, c.count, type, win));
  else DRT_MPI_CHECK(MPI_Accumulate(from, c.count, type, window.target(c.ps), spot.disp, c.count, type, MPI_SUM, win));
}

void issue_upload(const ShardWindow& window, const float* initial, const std::vector<Chunk>& all) {
  for (const Chunk& c : all) {
    const WindowSpot spot = window.layout(c.ps).params(c.shard_element);
    DRT_MPI_CHECK(MPI_Put(initial + c.at, c.count, MPI_FLOAT, window.target(c.ps), spot.disp, c.count, MPI_FLOAT,
                          window.data(spot.window)));
  }
}

void issue_gets(const ShardWindow& window, void* params, std::vector<Chunk>::const_iterator begin,
                std::vector<Chunk>::const_iterator end, std::vector<MPI_Request>* requests) {
  for (auto it = begin; it != end; ++it) {
    const ShardLayout& layout = window.layout(it->ps);
    const WindowSpot spot = layout.wire_params(it->shard_element);
    const MPI_Datatype type = wire_type(layout);
    void* into = static_cast<char*>(params) + it->at * layout.wire_bytes();
    if (requests) {
      requests->push_back(MPI_REQUEST_NULL);
      DRT_MPI_CHECK(MPI_Rget(into, it->count, type, window.target(it->ps), spot.disp, it->count, type,
                             window.data(spot.window), &requests->back()));
    } else {
      DRT_MPI_CHECK(
          MPI_Get(into, it->count, type, window.target(it->ps), spot.disp, it->count, type, window.data(spot.window)));
    }
  }
}

}  // namespace drt::ps
