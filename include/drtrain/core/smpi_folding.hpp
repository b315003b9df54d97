// SimGrid SMPI builds only (DRT_SMPI=1): memory folding, so that one host can simulate hundreds of
// nodes. With DRT_SMPI_FOLD=1 in the environment, every large buffer (AlignedBuffer, window
// memory) comes from SMPI_SHARED_MALLOC: all simulated ranks' copies map the same few physical
// pages, so the ranks' own memory stays flat as they grow (SimGrid's copies of RMA payloads in
// flight do not fold). Their contents are then meaningless: whatever checks values (the bench's
// exactness check) is skipped.
#pragma once

#include <cstddef>

namespace drt::smpi {

// Buffers below this stay private (real memory): small ones cost a mapping each when folded.
inline constexpr std::size_t kFoldMinBytes = std::size_t{64} << 10;

bool folding();  // DRT_SMPI_FOLD=1 (read once)
// True when a buffer of `bytes` is folded: folding() and bytes >= kFoldMinBytes.
inline bool folds(std::size_t bytes) { return bytes >= kFoldMinBytes && folding(); }
void* fold_alloc(std::size_t bytes);  // SMPI_SHARED_MALLOC; throws std::bad_alloc
void fold_free(void* p);              // SMPI_SHARED_FREE

}  // namespace drt::smpi
