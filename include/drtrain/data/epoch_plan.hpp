// EpochPlan: which samples every worker and tower trains on, step by step, in one epoch.
//
// Each epoch has its own permutation of [0, count), seeded by (seed, epoch) and identical on
// every rank. Global batch s is the slice [s*B, (s+1)*B) of that permutation; it is cut into
// W*T contiguous parts, part (w*T + t) for tower t of worker w. With B divisible by W*T every
// part has B/(W*T) samples. The last batch of an epoch holds the remainder r = count mod B
// (when r > 0): it is still trained, its r samples spread over the W*T parts as evenly as
// possible (part k gets [r*k/(W*T), r*(k+1)/(W*T)) of it; some parts may be empty). So every
// sample is used exactly once per epoch across the job, and steps_per_epoch = ceil(count / B).
#pragma once

#include <cstdint>
#include <vector>

namespace drt::data {

class EpochPlan {
 public:
  // Throws ConfigError when global_batch < 1 or is not divisible by workers * towers, and when
  // count, workers or towers is < 1 or epoch < 0.
  EpochPlan(int count, int global_batch, int workers, int towers, std::uint64_t seed, int epoch);

  int steps() const;  // ceil(count / global_batch)
  int epoch() const { return epoch_; }
  // The accessors below throw drt::Error for a step outside [0, steps()) or a worker/tower out
  // of range.
  // Number of samples in global batch `step` (global_batch, or the remainder for the last).
  int batch_size(int step) const;
  // Dataset indices for tower `tower` of worker `worker` at `step` (possibly empty).
  std::vector<int> samples(int step, int worker, int tower) const;
  // Where that part starts within global batch `step` (0 for the first part).
  int part_begin(int step, int worker, int tower) const;
  // All samples of global batch `step`, in part order (what one process at batch B would use).
  std::vector<int> global_samples(int step) const;
  const std::vector<int>& permutation() const { return permutation_; }

 private:
  int count_, global_batch_, workers_, towers_, epoch_;
  std::vector<int> permutation_;
};

}  // namespace drt::data
