#include "drtrain/core/param_layout.hpp"

#include "drtrain/core/choices.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt {

namespace {
constexpr Choice<DecayRule> kDecayRules[] = {{DecayRule::kMatrices, "matrices"}, {DecayRule::kAll, "all"}};
}  // namespace

DecayRule parse_decay_rule(const std::string& text) { return parse_choice(text, kDecayRules, "--decay-rule"); }
std::string to_string(DecayRule rule) { return choice_name(rule, kDecayRules); }

bool TensorSpec::decays(DecayRule rule) const {
  if (state) return false;
  if (decay != Decay::kByRule) return decay == Decay::kOn;
  return rule == DecayRule::kAll || matrix;
}

std::string TensorSpec::shape_string() const {
  std::vector<std::string> dims;
  for (auto d : shape) dims.push_back(std::to_string(d));
  return dims.empty() ? std::string("scalar") : join(dims, "x");
}

const TensorSpec& ParamLayout::add(const std::string& name, const std::vector<std::int64_t>& shape, bool state,
                                   bool matrix, Decay decay) {
  if (name.empty() || find(name)) throw Error(str("parameter tensor name '", name, "' is empty or used twice"));
  std::size_t numel = 1;
  for (auto d : shape) {
    if (d <= 0) throw Error(str("parameter tensor '", name, "' has a non-positive dimension"));
    numel *= static_cast<std::size_t>(d);
  }
  tensors_.push_back(TensorSpec{name, shape, total_, numel, state, matrix && !state, state ? Decay::kByRule : decay});
  if (state) {
    if (!state_ranges_.empty() && state_ranges_.back().second == total_) state_ranges_.back().second += numel;
    else state_ranges_.emplace_back(total_, total_ + numel);
  }
  total_ += numel;
  return tensors_.back();
}

const TensorSpec* ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::size_t ParamLayout::state_elements() const {
  std::size_t n = 0;
  for (const auto& r : state_ranges_) n += r.second - r.first;
  return n;
}

std::vector<std::pair<std::size_t, std::size_t>> ParamLayout::no_decay_ranges(DecayRule rule) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const auto& t : tensors_) {
    if (t.state || t.decays(rule)) continue;
    if (!out.empty() && out.back().second == t.offset) out.back().second += t.numel;
    else out.emplace_back(t.offset, t.offset + t.numel);
  }
  return out;
}

std::size_t ParamLayout::decaying_elements(DecayRule rule) const {
  std::size_t n = 0;
  for (const auto& t : tensors_)
    if (t.decays(rule)) n += t.numel;
  return n;
}

std::size_t ParamLayout::decaying_tensors(DecayRule rule) const {
  std::size_t n = 0;
  for (const auto& t : tensors_)
    if (t.decays(rule)) ++n;
  return n;
}

std::string ParamLayout::to_text() const {
  std::string out;
  for (const auto& t : tensors_)
    out += str(t.name, " ", t.shape_string(), " @", t.offset, t.state ? " state" : "", "\n");
  return out;
}

}  // namespace drt
