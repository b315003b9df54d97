#include "drtrain/ps/exchange_config.hpp"

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::ps {

RmaSync parse_rma_sync(const std::string& text) {
  if (text == "passive") return RmaSync::kPassive;
  if (text == "fence") return RmaSync::kFence;
  throw ConfigError(str("unknown --rma-sync '", text, "'; choices: passive, fence"));
}

std::string to_string(RmaSync sync) { return sync == RmaSync::kPassive ? "passive" : "fence"; }

GradPush parse_grad_push(const std::string& text) {
  if (text == "accumulate") return GradPush::kAccumulate;
  if (text == "ordered") return GradPush::kOrdered;
  if (text == "slots") return GradPush::kSlots;
  throw ConfigError(str("unknown --grad-push '", text, "'; choices: accumulate, ordered, slots"));
}

std::string to_string(GradPush push) {
  switch (push) {
    case GradPush::kAccumulate: return "accumulate";
    case GradPush::kOrdered: return "ordered";
    case GradPush::kSlots: return "slots";
  }
  return "?";
}

void ExchangeConfig::validate() const {
  if (chunk_bytes < 4096 || chunk_bytes > (std::size_t{1} << 30))
    throw ConfigError(str("--rma-chunk-kib must give a chunk between 4 KiB and 1 GiB (got ",
                          human_bytes(static_cast<double>(chunk_bytes)), ")"));
  if (!(hang_timeout_s > 0.0)) throw ConfigError(str("--hang-timeout must be positive (got ", hang_timeout_s, ")"));
  if (push == GradPush::kOrdered && sync != RmaSync::kPassive)
    throw ConfigError("--grad-push ordered needs --rma-sync passive (a fence epoch cannot order workers)");
  if (max_nap_us < 1) throw ConfigError(str("the poll nap must be at least 1 us (got ", max_nap_us, ")"));
}

std::string ExchangeConfig::describe() const {
  return str("rma-sync ", to_string(sync), ", grad-push ", to_string(push),
             push == GradPush::kSlots ? " (deterministic)" : "",
             ", chunks of ", human_bytes(static_cast<double>(chunk_bytes)), ", hang timeout ", hang_timeout_s, " s");
}

}  // namespace drt::ps
