#include "drtrain/ps/exchange_config.hpp"

#include <cstdlib>

#include "drtrain/core/choices.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::ps {

namespace {
constexpr Choice<RmaSync> kSyncs[] = {{RmaSync::kPassive, "passive"}, {RmaSync::kFence, "fence"}};
constexpr Choice<GradPush> kPushes[] = {
    {GradPush::kAccumulate, "accumulate"}, {GradPush::kOrdered, "ordered"}, {GradPush::kSlots, "slots"}};
constexpr Choice<Wire> kWires[] = {{Wire::kFp32, "fp32"}, {Wire::kBf16, "bf16"}};
constexpr Choice<PlanKind> kPlans[] = {{PlanKind::kContiguous, "contiguous"}, {PlanKind::kStriped, "striped"}};
}  // namespace

RmaSync parse_rma_sync(const std::string& text) { return parse_choice(text, kSyncs, "--rma-sync"); }
std::string to_string(RmaSync sync) { return choice_name(sync, kSyncs); }
GradPush parse_grad_push(const std::string& text) { return parse_choice(text, kPushes, "--grad-push"); }
std::string to_string(GradPush push) { return choice_name(push, kPushes); }
Wire parse_wire(const std::string& text) { return parse_choice(text, kWires, "--wire"); }
std::string to_string(Wire wire) { return choice_name(wire, kWires); }
PlanKind parse_plan_kind(const std::string& text) { return parse_choice(text, kPlans, "--shard-plan"); }
std::string to_string(PlanKind kind) { return choice_name(kind, kPlans); }

ShardPlan ExchangeConfig::shard_plan_for(std::size_t total, int num_ps, int num_nodes) const {
  if (plan == PlanKind::kContiguous || num_ps == 1) return ShardPlan::balanced(total, num_ps);
  const std::size_t block = chunk_bytes_for(num_nodes) / sizeof(float);
  const std::size_t even = (total + static_cast<std::size_t>(num_ps) - 1) / static_cast<std::size_t>(num_ps);
  const std::size_t align = ShardPlan::kAlignElems;
  // Whole blocks per span, as few as keep the span count within kMaxStripedSpans (checkpoints
  // store the boundaries in their header).
  const std::size_t per_span = block * std::max<std::size_t>(1, (total + ShardPlan::kMaxStripedSpans * block - 1) /
                                                                    (ShardPlan::kMaxStripedSpans * block));
  return ShardPlan::striped(total, num_ps,
                            std::max<std::size_t>(1, std::min(per_span, (even + align - 1) / align * align)));
}

SyncMode parse_sync_mode(const std::string& text) {
  const auto bad = [&] {
    return ConfigError(str("--sync-mode '", text,
                           "': use sync, backup:B (apply each step without the B slowest workers), ssp:S (a worker "
                           "may lead the slowest by at most S steps, S >= 1) or async"));
  };
  SyncMode mode;
  if (text == "sync") return mode;
  if (text == "async") {
    mode.kind = SyncKind::kAsync;
    return mode;
  }
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos) throw bad();
  const std::string name = text.substr(0, colon), number = text.substr(colon + 1);
  if (name == "backup") mode.kind = SyncKind::kBackup;
  else if (name == "ssp") mode.kind = SyncKind::kSsp;
  else throw bad();
  if (number.empty() || number.size() > 6 || number.find_first_not_of("0123456789") != std::string::npos) throw bad();
  mode.bound = std::stoi(number);
  if (mode.bound < (mode.kind == SyncKind::kBackup ? 0 : 1)) throw bad();  // backup:0 waits for all: sync
  return mode;
}

std::string to_string(const SyncMode& mode) {
  switch (mode.kind) {
    case SyncKind::kSync: return "sync";
    case SyncKind::kBackup: return str("backup:", mode.bound);
    case SyncKind::kSsp: return str("ssp:", mode.bound);
    case SyncKind::kAsync: return "async";
  }
  return "?";
}

void ExchangeConfig::validate_for(int num_workers) const {
  if (mode.kind == SyncKind::kBackup && mode.bound >= num_workers)
    throw ConfigError(str("--sync-mode ", to_string(mode),
                          " would apply steps without any worker's gradient: B must "
                          "be below the number of workers (",
                          num_workers, ")"));
}

Lookahead parse_lookahead(const std::string& text) {
  Lookahead out;
  if (text == "auto") return out;
  if (text == "off") {
    out.kind = Lookahead::Kind::kOff;
    return out;
  }
  char* end = nullptr;
  const double k = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(k > 0.0) || !(k <= 1000.0))
    throw ConfigError(str("--lookahead '", text,
                          "': use auto (updates ahead = the mean staleness measured), off, or a number of updates "
                          "ahead in (0, 1000]"));
  out.kind = Lookahead::Kind::kFixed;
  out.k = k;
  return out;
}

std::string to_string(const Lookahead& lookahead) {
  switch (lookahead.kind) {
    case Lookahead::Kind::kAuto: return "auto";
    case Lookahead::Kind::kOff: return "off";
    case Lookahead::Kind::kFixed: return str(lookahead.k);
  }
  return "?";
}

bool ExchangeConfig::lookahead_active(bool momentum_sgd, int num_workers) const {
  if (!mode.per_gradient() || !momentum_sgd) return false;
  return lookahead.kind == Lookahead::Kind::kFixed || (lookahead.kind == Lookahead::Kind::kAuto && num_workers > 1);
}

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
  if (mode.relaxed() && deterministic)
    throw ConfigError(str("--deterministic with --sync-mode ", to_string(mode),
                          ": which gradients a step applies, and when, depends on arrival times in that mode, so no "
                          "run can be repeated bitwise; use --sync-mode sync (the default) for reproducible runs"));
  if (mode.relaxed() && sync != RmaSync::kPassive)
    throw ConfigError(
        str("--sync-mode ", to_string(mode),
            " needs --rma-sync passive (a fence is collective: every worker would wait for every other)"));
  if (mode.relaxed() && push == GradPush::kOrdered)
    throw ConfigError(str("--sync-mode ", to_string(mode),
                          " pushes into per-worker slots; --grad-push ordered is for --sync-mode sync"));
  if (lookahead.kind == Lookahead::Kind::kFixed && !mode.per_gradient())
    throw ConfigError(str("--lookahead ", to_string(lookahead),
                          " is for --sync-mode ssp:S and async, where a gradient "
                          "is applied after other workers' updates (this run: --sync-mode ",
                          to_string(mode), ")"));
  if (max_nap_us < 1) throw ConfigError(str("the poll nap must be at least 1 us (got ", max_nap_us, ")"));
}

std::string ExchangeConfig::describe(int num_nodes) const {
  return str("sync-mode ", to_string(mode), mode.per_gradient() ? ", lookahead " + to_string(lookahead) : std::string(),
             ", rma-sync ", to_string(sync), ", grad-push ", to_string(grad_push()),
             per_worker_slots() && !mode.relaxed() ? " (deterministic)" : "", ", wire ", to_string(wire),
             ", shard plan ", to_string(plan), ", chunks of ",
             human_bytes(static_cast<double>(chunk_bytes_for(num_nodes))),
             chunk_bytes == 0 ? str(" (for ", num_nodes, num_nodes == 1 ? " node)" : " nodes)") : std::string(),
             ", hang timeout ", hang_timeout_s, " s");
}

}  // namespace drt::ps
