#include "drtrain/ps/exchange_config.hpp"

#include "drtrain/core/choices.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::ps {

namespace {
constexpr Choice<RmaSync> kSyncs[] = {{RmaSync::kPassive, "passive"}, {RmaSync::kFence, "fence"}};
constexpr Choice<GradPush> kPushes[] = {
    {GradPush::kAccumulate, "accumulate"}, {GradPush::kOrdered, "ordered"}, {GradPush::kSlots, "slots"}};
constexpr Choice<Wire> kWires[] = {{Wire::kFp32, "fp32"}, {Wire::kBf16, "bf16"}};
}  // namespace

RmaSync parse_rma_sync(const std::string& text) { return parse_choice(text, kSyncs, "--rma-sync"); }
std::string to_string(RmaSync sync) { return choice_name(sync, kSyncs); }
GradPush parse_grad_push(const std::string& text) { return parse_choice(text, kPushes, "--grad-push"); }
std::string to_string(GradPush push) { return choice_name(push, kPushes); }
Wire parse_wire(const std::string& text) { return parse_choice(text, kWires, "--wire"); }
std::string to_string(Wire wire) { return choice_name(wire, kWires); }

void ExchangeConfig::validate() const {
  if (chunk_bytes != 0 && (chunk_bytes < 4096 || chunk_bytes > (std::size_t{1} << 30)))
    throw ConfigError(str("--rma-chunk-kib must give a chunk between 4 KiB and 1 GiB (got ",
                          human_bytes(static_cast<double>(chunk_bytes)), ")"));
  if (!(hang_timeout_s > 0.0)) throw ConfigError(str("--hang-timeout must be positive (got ", hang_timeout_s, ")"));
  if (deterministic && push == GradPush::kOrdered)
    throw ConfigError("--deterministic (per-worker slots) and --grad-push ordered are two different ways to "
                      "reproducible sums; pass one of them");
  if (wire == Wire::kBf16 && push == GradPush::kOrdered)
    throw ConfigError("--wire bf16 pushes into per-worker slots that the PS sums in float32 (MPI has no bfloat16 "
                      "sum), which is already reproducible; drop --grad-push ordered");
  if (wire == Wire::kBf16 && sync == RmaSync::kFence)
    throw ConfigError("--wire bf16 is not available with --rma-sync fence: under MPICH 4.0.2 a worker now and then "
                      "read stale parameters right after the closing fence (cause not found yet); use --rma-sync "
                      "passive (the default)");
  if (grad_push() == GradPush::kOrdered && sync != RmaSync::kPassive)
    throw ConfigError("--grad-push ordered needs --rma-sync passive (a fence epoch cannot order workers)");
  if (max_nap_us < 1) throw ConfigError(str("the poll nap must be at least 1 us (got ", max_nap_us, ")"));
}

std::string ExchangeConfig::describe(int num_nodes) const {
  return str("rma-sync ", to_string(sync), ", grad-push ", to_string(grad_push()),
             per_worker_slots() ? " (deterministic)" : "", ", wire ", to_string(wire), ", chunks of ",
             human_bytes(static_cast<double>(chunk_bytes_for(num_nodes))),
             chunk_bytes == 0 ? str(" (for ", num_nodes, num_nodes == 1 ? " node)" : " nodes)") : std::string(),
             ", hang timeout ", hang_timeout_s, " s");
}

}  // namespace drt::ps
