// ShardPlan: how the flat parameter space [0, total) is cut into P contiguous shards, one per
// PS, balanced by bytes. A tensor may span shards. The plan depends only on (total, P), is the
// same on every rank, and serialises to text and to its boundary list (checkpoints store it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "drtrain/core/param_layout.hpp"

namespace drt::ps {

struct ShardRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};

// The part of a range [offset, offset + count) that one shard owns.
struct ShardPiece {
  int shard = 0;
  std::size_t begin = 0;  // global element index
  std::size_t count = 0;
};

class ShardPlan {
 public:
  // Shard boundaries fall on multiples of kAlignElems (64 bytes) whenever every shard still
  // gets at least 1024 elements; otherwise on single elements. Max imbalance: one alignment unit.
  static constexpr std::size_t kAlignElems = 16;

  static ShardPlan balanced(std::size_t total, int num_shards);
  // boundaries: P + 1 non-decreasing values from 0 to total. Throws ConfigError otherwise.
  static ShardPlan from_boundaries(std::vector<std::size_t> boundaries);
  static ShardPlan from_text(const std::string& text);  // inverse of to_text()

  int num_shards() const { return static_cast<int>(boundaries_.size()) - 1; }
  std::size_t total() const { return boundaries_.back(); }
  ShardRange shard(int p) const;
  const std::vector<std::size_t>& boundaries() const { return boundaries_; }
  int owner_of(std::size_t element) const;
  std::size_t largest_shard() const;

  // Splits [offset, offset + count) by owning shard, in ascending order.
  std::vector<ShardPiece> split(std::size_t offset, std::size_t count) const;

  std::string to_text() const;  // "shard-plan v1 P=2 total=10 : 0 5 10"
  // Human-readable table: each shard's range, bytes and the tensors (or parts) it holds.
  std::string describe(const drt::ParamLayout& layout) const;

 private:
  explicit ShardPlan(std::vector<std::size_t> boundaries) : boundaries_(std::move(boundaries)) {}
  std::vector<std::size_t> boundaries_;
};

}  // namespace drt::ps
