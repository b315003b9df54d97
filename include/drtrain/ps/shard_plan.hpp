// ShardPlan: which PS owns each element of the flat parameter space [0, total), and where in
// that PS's shard it lives. A plan is a list of spans (contiguous ranges of the flat space) in
// ascending order; span i belongs to PS i mod P, and a PS's shard is its spans back to back.
//   balanced(total, P)        P spans: shard p is one contiguous range, balanced by bytes.
//   striped(total, P, S)      spans of S elements dealt round-robin (PS 0 gets spans 0, P, 2P...):
//                             every layer larger than P * S is spread over every PS, so a
//                             layer's push (--overlap sends layer by layer) uses every PS's link.
// A tensor may span shards. The plan depends only on its arguments, is the same on every rank,
// and serialises to text and to its span boundaries (checkpoints store them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "drtrain/core/param_layout.hpp"

namespace drt::ps {

// The part of a range [offset, offset + count) that one span owns.
struct ShardPiece {
  int shard = 0;
  std::size_t begin = 0;  // global element index
  std::size_t count = 0;
  std::size_t local = 0;  // index of element `begin` in the shard
};

class ShardPlan {
 public:
  // Shard boundaries fall on multiples of kAlignElems (64 bytes) whenever every shard still
  // gets at least 1024 elements; otherwise on single elements. Max imbalance: one alignment unit.
  static constexpr std::size_t kAlignElems = 16;
  // ExchangeConfig::shard_plan_for widens the stripe so that a plan has at most this many spans
  // (8 KiB of boundaries in a checkpoint's header).
  static constexpr std::size_t kMaxStripedSpans = 1024;

  static ShardPlan balanced(std::size_t total, int num_shards);
  // Spans of `stripe` elements (the last one shorter), dealt round-robin over the shards.
  // ConfigError when stripe is 0.
  static ShardPlan striped(std::size_t total, int num_shards, std::size_t stripe);
  // boundaries: the spans' boundaries, from 0 to total, never decreasing; span i belongs to
  // shard i mod num_shards (num_shards = 0: one span per shard). Throws ConfigError otherwise.
  static ShardPlan from_boundaries(std::vector<std::size_t> boundaries, int num_shards = 0);
  static ShardPlan from_text(const std::string& text);  // inverse of to_text()

  int num_shards() const { return num_shards_; }
  std::size_t total() const { return boundaries_.back(); }
  std::size_t stripe() const { return stripe_; }  // 0: not striped
  std::size_t shard_size(int p) const;
  // Shard p's non-empty spans, in ascending order (their `local` ascending from 0).
  std::vector<ShardSpan> spans(int p) const;
  // Every span's boundary (P + 1 values for a balanced plan).
  const std::vector<std::size_t>& boundaries() const { return boundaries_; }
  int owner_of(std::size_t element) const;
  std::size_t largest_shard() const;

  // Splits [offset, offset + count) by owning span, in ascending order.
  std::vector<ShardPiece> split(std::size_t offset, std::size_t count) const;

  // "shard-plan v1 P=2 total=10 : 0 5 10" (balanced or any one-span-per-shard plan);
  // "shard-plan v2 P=2 total=10 stripe=4" (striped).
  std::string to_text() const;
  // Human-readable table: each shard's range(s), bytes and the tensors (or parts) it holds.
  std::string describe(const drt::ParamLayout& layout) const;

 private:
  ShardPlan(std::vector<std::size_t> boundaries, int num_shards, std::size_t stripe);
  std::size_t span_count() const { return boundaries_.size() - 1; }
  std::size_t span_of(std::size_t element) const;  // the span holding element (element < total)
  int owner_of_span(std::size_t span) const;       // span i belongs to shard i mod P

  std::vector<std::size_t> boundaries_;  // span i: [boundaries_[i], boundaries_[i + 1])
  int num_shards_ = 0;
  std::size_t stripe_ = 0;
  std::vector<std::size_t> span_local_;  // span i's offset in its shard
  std::vector<std::size_t> shard_size_;
};

}  // namespace drt::ps
