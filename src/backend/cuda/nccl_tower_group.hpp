// The tower group of a worker's GPUs (internal; no CUDA types): NCCL among the towers, pinned
// host buffers for the exchange.
#pragma once

#include <memory>
#include <vector>

#include "drtrain/backend/tower_group.hpp"

namespace drt::backend {

std::unique_ptr<TowerGroup> make_nccl_tower_group(const std::vector<TowerSlot>& towers, std::size_t n);

}  // namespace drt::backend
