#include "drtrain/ps/shard_plan.hpp"

#include <algorithm>
#include <sstream>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::ps {

ShardPlan::ShardPlan(std::vector<std::size_t> boundaries, int num_shards, std::size_t stripe)
    : boundaries_(std::move(boundaries)),
      num_shards_(num_shards),
      stripe_(stripe),
      span_local_(span_count()),
      shard_size_(static_cast<std::size_t>(num_shards), 0) {
  for (std::size_t i = 0; i < span_count(); ++i) {
    std::size_t& size = shard_size_[static_cast<std::size_t>(owner_of_span(i))];
    span_local_[i] = size;
    size += boundaries_[i + 1] - boundaries_[i];
  }
}

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
  return ShardPlan(std::move(boundaries), num_shards, 0);
}

ShardPlan ShardPlan::striped(std::size_t total, int num_shards, std::size_t stripe) {
  if (num_shards < 1) throw ConfigError(str("a shard plan needs at least one shard, got ", num_shards));
  if (stripe == 0) throw ConfigError("a striped shard plan needs a stripe of at least one element");
  std::vector<std::size_t> boundaries{0};
  for (std::size_t b = 0; b < total;) {
    b += std::min(stripe, total - b);
    boundaries.push_back(b);
  }
  // At least one span per shard, so that a plan of P shards always names P (empty tails allowed).
  while (boundaries.size() < static_cast<std::size_t>(num_shards) + 1) boundaries.push_back(total);
  return ShardPlan(std::move(boundaries), num_shards, stripe);
}

ShardPlan ShardPlan::from_boundaries(std::vector<std::size_t> boundaries, int num_shards) {
  if (boundaries.size() < 2 || boundaries.front() != 0 || !std::is_sorted(boundaries.begin(), boundaries.end()))
    throw ConfigError("invalid shard plan: boundaries must start at 0 and never decrease");
  const int spans = static_cast<int>(boundaries.size()) - 1;
  if (num_shards == 0) num_shards = spans;
  if (num_shards < 1 || num_shards > spans)
    throw ConfigError(str("invalid shard plan: ", spans, " span(s) for ", num_shards, " shards"));
  return ShardPlan(std::move(boundaries), num_shards, 0);
}

ShardPlan ShardPlan::from_text(const std::string& text) {
  std::istringstream in(text);
  std::string magic, version, shards_field, total_field, last;
  in >> magic >> version >> shards_field >> total_field >> last;
  const bool v1 = version == "v1" && last == ":", v2 = version == "v2" && last.rfind("stripe=", 0) == 0;
  if (magic != "shard-plan" || (!v1 && !v2) || shards_field.rfind("P=", 0) != 0 || total_field.rfind("total=", 0) != 0)
    throw ConfigError(str("invalid shard plan text '", text, "'"));
  const int shards = static_cast<int>(parse_count(shards_field.substr(2), "shard count"));
  const auto total = static_cast<std::size_t>(parse_count(total_field.substr(6), "total"));
  std::string field;
  if (v2) {
    if (in >> field) throw ConfigError(str("invalid shard plan text '", text, "': trailing '", field, "'"));
    return striped(total, shards, static_cast<std::size_t>(parse_count(last.substr(7), "stripe")));
  }
  std::vector<std::size_t> boundaries;
  while (in >> field) boundaries.push_back(static_cast<std::size_t>(parse_count(field, "shard boundary")));
  if (boundaries.size() != static_cast<std::size_t>(shards) + 1 || boundaries.back() != total)
    throw ConfigError(str("invalid shard plan text '", text, "': boundary count or total mismatch"));
  return from_boundaries(std::move(boundaries));
}

std::size_t ShardPlan::shard_size(int p) const {
  DRT_ASSERT(p >= 0 && p < num_shards(), str("shard ", p));
  return shard_size_[static_cast<std::size_t>(p)];
}

std::vector<ShardSpan> ShardPlan::spans(int p) const {
  DRT_ASSERT(p >= 0 && p < num_shards(), str("shard ", p));
  std::vector<ShardSpan> out;
  for (auto i = static_cast<std::size_t>(p); i < span_count(); i += static_cast<std::size_t>(num_shards_))
    if (boundaries_[i + 1] > boundaries_[i]) out.push_back({boundaries_[i], boundaries_[i + 1], span_local_[i]});
  return out;
}

std::size_t ShardPlan::span_of(std::size_t element) const {
  // The last span whose begin <= element (empty spans are skipped this way).
  return static_cast<std::size_t>(std::upper_bound(boundaries_.begin(), boundaries_.end(), element) -
                                  boundaries_.begin() - 1);
}

int ShardPlan::owner_of_span(std::size_t span) const {
  return static_cast<int>(span % static_cast<std::size_t>(num_shards_));
}

int ShardPlan::owner_of(std::size_t element) const {
  DRT_ASSERT(element < total(), str("element ", element, " of ", total()));
  return owner_of_span(span_of(element));
}

std::size_t ShardPlan::largest_shard() const { return *std::max_element(shard_size_.begin(), shard_size_.end()); }

std::vector<ShardPiece> ShardPlan::split(std::size_t offset, std::size_t count) const {
  DRT_ASSERT(offset + count <= total(), str("range ", offset, "+", count, " of ", total()));
  std::vector<ShardPiece> pieces;
  if (count == 0) return pieces;
  const std::size_t end = offset + count;
  for (std::size_t i = span_of(offset); i < span_count() && boundaries_[i] < end; ++i) {
    const std::size_t lo = std::max(boundaries_[i], offset), hi = std::min(boundaries_[i + 1], end);
    if (hi > lo) pieces.push_back({owner_of_span(i), lo, hi - lo, span_local_[i] + (lo - boundaries_[i])});
  }
  return pieces;
}

std::string ShardPlan::to_text() const {
  if (stripe_ != 0) return str("shard-plan v2 P=", num_shards(), " total=", total(), " stripe=", stripe_);
  DRT_ASSERT(span_count() == static_cast<std::size_t>(num_shards()), "to_text of a plan with several spans per shard");
  std::string out = str("shard-plan v1 P=", num_shards(), " total=", total(), " :");
  for (auto b : boundaries_) out += str(" ", b);
  return out;
}

std::string ShardPlan::describe(const ParamLayout& layout) const {
  std::string out =
      str("shard plan: ", human_bytes(static_cast<double>(total()) * 4), " of parameters (", total(), " floats) over ",
          num_shards(), " PS",
          stripe_ != 0 ? str(", striped in spans of ", human_bytes(static_cast<double>(stripe_) * 4)) : std::string(),
          "\n");
  for (int p = 0; p < num_shards(); ++p) {
    const std::vector<ShardSpan> mine = spans(p);
    std::vector<std::string> parts;
    for (const auto& t : layout.tensors()) {
      std::size_t held = 0, lo = t.offset + t.numel, hi = t.offset;  // elements held; their hull
      for (const ShardSpan& s : mine) {
        const std::size_t a = std::max(s.begin, t.offset), b = std::min(s.end, t.offset + t.numel);
        if (b <= a) continue;
        held += b - a;
        lo = std::min(lo, a);
        hi = std::max(hi, b);
      }
      if (held == 0) continue;
      if (held == t.numel) parts.push_back(t.name);
      else if (held == hi - lo) parts.push_back(str(t.name, "[", lo - t.offset, ":", hi - t.offset, "]"));
      else parts.push_back(str(t.name, "(", held * 100 / t.numel, "%)"));
    }
    // A deep model has many tensors: the first and last few name the shard well enough.
    if (parts.size() > 8) {
      const std::size_t n = parts.size();
      parts = {parts[0], parts[1], parts[2], str("... (", n - 5, " more) ..."), parts[n - 2], parts[n - 1]};
    }
    const std::string where = mine.size() == 1 ? str("[", mine[0].begin, ", ", mine[0].end, ")")
                              : mine.empty()   ? std::string("[]")
                                               : str(mine.size(), " spans");
    out += str("  PS ", p, ": ", where, " ", human_bytes(static_cast<double>(shard_size(p)) * 4), "  ",
               join(parts, " "), "\n");
  }
  return out;
}

}  // namespace drt::ps
