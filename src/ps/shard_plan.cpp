#include "drtrain/ps/shard_plan.hpp"

#include <algorithm>
#include <sstream>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::ps {

ShardPlan ShardPlan::balanced(std::size_t total, int num_shards) {
  if (num_shards < 1) throw ConfigError(str("a shard plan needs at least one shard, got ", num_shards));
  const auto shards = static_cast<std::size_t>(num_shards);
  const std::size_t align = total / shards >= 1024 ? kAlignElems : 1;
  std::vector<std::size_t> boundaries(shards + 1, 0);
  for (std::size_t p = 1; p < shards; ++p) {
    // p * total / shards without overflow, then rounded to the nearest aligned element.
    const std::size_t ideal = (total / shards) * p + (total % shards) * p / shards;
    boundaries[p] = std::min(total, (ideal + align / 2) / align * align);
  }
  boundaries[shards] = total;
  return ShardPlan(std::move(boundaries));
}

ShardPlan ShardPlan::from_boundaries(std::vector<std::size_t> boundaries) {
  if (boundaries.size() < 2 || boundaries.front() != 0 || !std::is_sorted(boundaries.begin(), boundaries.end()))
    throw ConfigError("invalid shard plan: boundaries must start at 0 and never decrease");
  return ShardPlan(std::move(boundaries));
}

ShardPlan ShardPlan::from_text(const std::string& text) {
  std::istringstream in(text);
  std::string magic, version, shards_field, total_field, colon;
  in >> magic >> version >> shards_field >> total_field >> colon;
  if (magic != "shard-plan" || version != "v1" || shards_field.rfind("P=", 0) != 0 ||
      total_field.rfind("total=", 0) != 0 || colon != ":")
    throw ConfigError(str("invalid shard plan text '", text, "'"));
  const auto shards = static_cast<std::size_t>(parse_count(shards_field.substr(2), "shard count"));
  std::vector<std::size_t> boundaries;
  std::string field;
  while (in >> field) boundaries.push_back(static_cast<std::size_t>(parse_count(field, "shard boundary")));
  if (boundaries.size() != shards + 1 ||
      boundaries.back() != static_cast<std::size_t>(parse_count(total_field.substr(6), "total")))
    throw ConfigError(str("invalid shard plan text '", text, "': boundary count or total mismatch"));
  return from_boundaries(std::move(boundaries));
}

ShardRange ShardPlan::shard(int p) const {
  DRT_ASSERT(p >= 0 && p < num_shards(), str("shard ", p));
  return {boundaries_[static_cast<std::size_t>(p)], boundaries_[static_cast<std::size_t>(p) + 1]};
}

int ShardPlan::owner_of(std::size_t element) const {
  DRT_ASSERT(element < total(), str("element ", element, " of ", total()));
  // The owner is the last shard whose begin <= element (empty shards are skipped this way).
  const auto it = std::upper_bound(boundaries_.begin(), boundaries_.end(), element);
  return static_cast<int>(it - boundaries_.begin()) - 1;
}

std::size_t ShardPlan::largest_shard() const {
  std::size_t largest = 0;
  for (int p = 0; p < num_shards(); ++p) largest = std::max(largest, shard(p).size());
  return largest;
}

std::vector<ShardPiece> ShardPlan::split(std::size_t offset, std::size_t count) const {
  DRT_ASSERT(offset + count <= total(), str("range ", offset, "+", count, " of ", total()));
  std::vector<ShardPiece> pieces;
  if (count == 0) return pieces;
  const std::size_t end = offset + count;
  for (int p = owner_of(offset); p < num_shards() && shard(p).begin < end; ++p) {
    const ShardRange r = shard(p);
    const std::size_t lo = std::max(r.begin, offset), hi = std::min(r.end, end);
    if (hi > lo) pieces.push_back({p, lo, hi - lo});
  }
  return pieces;
}

std::string ShardPlan::to_text() const {
  std::string out = str("shard-plan v1 P=", num_shards(), " total=", total(), " :");
  for (auto b : boundaries_) out += str(" ", b);
  return out;
}

std::string ShardPlan::describe(const ParamLayout& layout) const {
  std::string out = str("shard plan: ", human_bytes(static_cast<double>(total()) * 4), " of parameters (", total(),
                        " floats) over ", num_shards(), " PS\n");
  for (int p = 0; p < num_shards(); ++p) {
    const ShardRange r = shard(p);
    std::vector<std::string> parts;
    for (const auto& t : layout.tensors()) {
      const std::size_t lo = std::max(r.begin, t.offset), hi = std::min(r.end, t.offset + t.numel);
      if (hi <= lo) continue;
      parts.push_back(hi - lo == t.numel ? t.name : str(t.name, "[", lo - t.offset, ":", hi - t.offset, "]"));
    }
    // A deep model has many tensors: the first and last few name the shard well enough.
    if (parts.size() > 8) {
      const std::size_t n = parts.size();
      parts = {parts[0], parts[1], parts[2], str("... (", n - 5, " more) ..."), parts[n - 2], parts[n - 1]};
    }
    out += str("  PS ", p, ": [", r.begin, ", ", r.end, ") ", human_bytes(static_cast<double>(r.size()) * 4), "  ",
               join(parts, " "), "\n");
  }
  return out;
}

}  // namespace drt::ps
