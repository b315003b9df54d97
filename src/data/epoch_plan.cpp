#include "drtrain/data/epoch_plan.hpp"

#include <random>
#include <utility>

#include "drtrain/core/error.hpp"
#include "drtrain/core/hash.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {

namespace {

// Uniform integer in [0, bound), bound >= 1, without modulo bias: draws below 2^64 mod bound are
// rejected so that every residue is hit by the same number of 64-bit values. Written by hand
// (not std::uniform_int_distribution) so the sequence is the same with every standard library.
std::uint64_t bounded(std::mt19937_64& rng, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;  // == 2^64 mod bound
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

EpochPlan::EpochPlan(int count, int global_batch, int workers, int towers, std::uint64_t seed, int epoch)
    : count_(count), global_batch_(global_batch), workers_(workers), towers_(towers), epoch_(epoch) {
  if (count < 1) throw ConfigError(str("the dataset is empty (", count, " samples); nothing to train on"));
  if (workers < 1) throw ConfigError(str("the number of workers must be >= 1 (got ", workers, ")"));
  if (towers < 1) throw ConfigError(str("the number of towers per worker must be >= 1 (got ", towers, ")"));
  if (epoch < 0) throw ConfigError(str("the epoch must be >= 0 (got ", epoch, ")"));
  if (global_batch < 1) throw ConfigError(str("--batch-size must be >= 1 (got ", global_batch, ")"));
  const std::int64_t parts = std::int64_t{workers} * towers;  // int64: W*T may overflow int
  if (global_batch % parts != 0) {
    const std::int64_t below = global_batch / parts * parts;
    const std::int64_t above = below + parts;
    throw ConfigError(str("--batch-size ", global_batch, " is not divisible by workers x towers = ", workers, " x ",
                          towers, " = ", parts, "; pass a multiple of ", parts, " (e.g. ",
                          below > 0 ? str(below, " or ", above) : str(above), ")"));
  }

  std::mt19937_64 rng(splitmix64(seed * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(epoch) + 1)));
  permutation_.resize(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) permutation_[static_cast<std::size_t>(i)] = i;
  // Fisher-Yates from the back: position i swaps with a uniform position in [0, i].
  for (std::size_t i = permutation_.size() - 1; i > 0; --i)
    std::swap(permutation_[i], permutation_[bounded(rng, i + 1)]);
}

int EpochPlan::steps() const { return static_cast<int>((std::int64_t{count_} + global_batch_ - 1) / global_batch_); }

int EpochPlan::batch_size(int step) const {
  if (step < 0 || step >= steps())
    throw Error(str("EpochPlan::batch_size: step ", step, " is outside the epoch's ", steps(), " steps"));
  const int remainder = count_ % global_batch_;
  return step == steps() - 1 && remainder > 0 ? remainder : global_batch_;
}

std::vector<int> EpochPlan::samples(int step, int worker, int tower) const {
  if (worker < 0 || worker >= workers_ || tower < 0 || tower >= towers_)
    throw Error(str("EpochPlan::samples: worker ", worker, ", tower ", tower, " is outside ", workers_, " workers x ",
                    towers_, " towers"));
  const std::int64_t parts = std::int64_t{workers_} * towers_;
  const std::int64_t part = std::int64_t{worker} * towers_ + tower;
  const std::int64_t size = batch_size(step);  // validates step
  const std::int64_t start = std::int64_t{step} * global_batch_;
  // Full batches: size/parts each. The remainder batch: part k gets [size*k/parts, size*(k+1)/parts),
  // which is the same formula (exact when size is divisible by parts).
  const std::int64_t begin = start + size * part / parts;
  const std::int64_t end = start + size * (part + 1) / parts;
  return std::vector<int>(permutation_.begin() + begin, permutation_.begin() + end);
}

int EpochPlan::part_begin(int step, int worker, int tower) const {
  const std::int64_t parts = std::int64_t{workers_} * towers_;
  const std::int64_t part = std::int64_t{worker} * towers_ + tower;
  return static_cast<int>(std::int64_t{batch_size(step)} * part / parts);
}

std::vector<int> EpochPlan::global_samples(int step) const {
  const std::int64_t start = std::int64_t{step} * global_batch_;
  const std::int64_t size = batch_size(step);
  return std::vector<int>(permutation_.begin() + start, permutation_.begin() + start + size);
}

}  // namespace drt::data
