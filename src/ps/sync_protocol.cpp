#include "sync_protocol.hpp"

namespace drt::ps {

std::unique_ptr<SyncProtocol> make_sync_protocol(const comm::Topology& topo, ShardWindow& window,
                                                 const ExchangeConfig& config) {
  if (config.sync == RmaSync::kFence) return make_fence_sync(topo, window);
  return make_passive_sync(topo, window, config);
}

}  // namespace drt::ps
