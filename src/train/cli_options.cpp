#include "drtrain/train/cli_options.hpp"

#include <set>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::train {
namespace {

// An enumerated option: shown with its current value as default, parsed by `parse` (whose
// ConfigError lists the choices) into `out`.
template <typename E, typename Parse>
po::typed_value<std::string>* choice(E& out, const std::string& shown, Parse parse) {
  return po::value<std::string>()->default_value(shown)->notifier(
      [&out, parse](const std::string& s) { out = parse(s); });
}

// Access to the placeholder values of a Boost error (protected members, reached through a
// pointer to member formed in a derived class).
struct PoErrorAccess : po::error_with_option_name {
  static constexpr auto substitutions = &PoErrorAccess::m_substitutions;
};

}  // namespace

std::string po_error_message(const po::error& e) {
  // Boost.Program_options (1.74) builds what() by replacing each %name% placeholder
  // (%value%, %option%, %original_token%, ...) until none is left, so a value or token that
  // contains its own placeholder ("--epochs %value%", an INI key "%option%") makes what() loop
  // forever with a growing message. Every '%' in the user's text becomes a full-width percent
  // sign (U+FF05), which no placeholder matches; the message still shows the text.
  if (const auto* named = dynamic_cast<const po::error_with_option_name*>(&e)) {
    // The exception object itself is never const (a thrown copy); only this reference is.
    auto& subs = const_cast<po::error_with_option_name*>(named)->*PoErrorAccess::substitutions;
    for (auto& entry : subs)
      for (std::size_t at; (at = entry.second.find('%')) != std::string::npos;)
        entry.second.replace(at, 1, "\xEF\xBC\x85");
  }
  return e.what();
}

po::typed_value<double>* number(double& out) { return po::value<double>(&out)->default_value(out, shortest(out)); }

po::typed_value<bool>* on_off(bool& out) {
  return po::value<bool>(&out)->default_value(out, out ? "true" : "false")->implicit_value(true, "true");
}

void keep_last_occurrence(po::parsed_options& parsed) {
  std::set<std::string> later;
  std::vector<po::option> kept;
  for (auto it = parsed.options.rbegin(); it != parsed.options.rend(); ++it)
    if (it->string_key.empty() || later.insert(it->string_key).second) kept.push_back(*it);
  parsed.options.assign(kept.rbegin(), kept.rend());
}

po::options_description layout_options(LayoutOptions& out) {
  po::options_description d("Layout");
  // One option a line (clang-format 14 runs add_options() chains together).
  // clang-format off
  d.add_options()
      ("num-ps", po::value<int>(&out.num_ps)->default_value(out.num_ps),
       "parameter-server ranks; the other ranks are workers")
      ("ps-placement", choice(out.placement, comm::to_string(out.placement), comm::parse_placement),
       "which ranks are PS: first (ranks 0..P-1) | per-node (one per node, co-located)")
      ("expect-ranks", po::value<int>(&out.expect_ranks)->default_value(out.expect_ranks),
       "fail unless MPI reports exactly this many ranks (job scripts pass $SLURM_NTASKS: catches a "
       "launcher that starts singletons); 0: no check");
  // clang-format on
  return d;
}

po::options_description exchange_options(ps::ExchangeConfig& out) {
  po::options_description d("Exchange");
  // One option a line (clang-format 14 runs add_options() chains together).
  // clang-format off
  d.add_options()
      ("sync-mode", choice(out.mode, ps::to_string(out.mode), ps::parse_sync_mode),
       "when the PS apply gradients: sync (every step waits for every worker) | backup:B (apply each step "
       "once all but B workers' gradients are in; late ones are dropped) | ssp:S (each gradient applied as "
       "it arrives; a worker leads the slowest by at most S steps) | async (each gradient applied as it "
       "arrives, no waiting)")
      ("lookahead", choice(out.lookahead, ps::to_string(out.lookahead), ps::parse_lookahead),
       "--sync-mode ssp:S and async with momentum SGD: the PS publishes the parameters extrapolated k updates "
       "along the momentum (params - lr * k * momentum), where they will be when a gradient computed from them is "
       "applied: auto (k = the mean staleness measured; off with one worker) | off | k")
      ("rma-sync", choice(out.sync, ps::to_string(out.sync), ps::parse_rma_sync),
       "RMA synchronisation: passive (lock_all + flush + arrival/version words) | fence")
      ("grad-push", choice(out.push, ps::to_string(out.push), ps::parse_grad_push),
       "how gradients reach the PS: accumulate (MPI_SUM, any order) | ordered (worker order, "
       "reproducible; passive only) | slots (= --deterministic)")
      ("deterministic", on_off(out.deterministic),
       "per-worker gradient slots summed in worker order: bitwise reproducible whatever the "
       "arrival order; W x gradient memory on each PS (same as --grad-push slots); on GPUs also only "
       "deterministic cuDNN algorithms")
      ("wire", choice(out.wire, ps::to_string(out.wire), ps::parse_wire),
       "number format on the network: fp32 | bf16 (gradients and parameters as bfloat16, half the bytes; "
       "per-worker gradient slots summed in float32 on the PS, which keeps float32 master parameters)")
      ("shard-plan", choice(out.plan, ps::to_string(out.plan), ps::parse_plan_kind),
       "how the parameters are cut over the PS: contiguous (one range per PS) | striped (spans of one RMA "
       "block dealt round-robin, so every large layer is spread over every PS: with --overlap a layer's "
       "push uses every PS's link at once)")
      ("rma-chunk-kib", po::value<std::size_t>()->default_value(out.chunk_bytes / 1024)
           ->notifier([&out](std::size_t kib) { out.chunk_bytes = kib * 1024; }),
       "largest single MPI_Accumulate/Put/Get and synchronisation block, KiB; 0 = by layout: 1024 on one "
       "node, 128 across nodes")
      ("poll-nap-us", po::value<int>(&out.max_nap_us)->default_value(out.max_nap_us),
       "longest sleep between two polls of a waiting rank, microseconds (shorter: less latency, more CPU)")
      ("hang-timeout", number(out.hang_timeout_s),
       "seconds a rank waits for a peer before it reports the peer and aborts the job");
  // clang-format on
  return d;
}

po::options_description optimizer_options(optim::OptimizerConfig& out) {
  po::options_description d("Optimizer (applied by the PS to its shard)");
  // One option a line (clang-format 14 runs add_options() chains together).
  // clang-format off
  d.add_options()
      ("optimizer", choice(out.kind, optim::to_string(out.kind), optim::parse_optimizer),
       "sgd | adam | adamw")
      ("lr", number(out.lr), "base learning rate")
      ("momentum", number(out.momentum), "sgd momentum (0: plain SGD)")
      ("nesterov", on_off(out.nesterov), "Nesterov momentum (sgd)")
      ("beta1", number(out.beta1), "adam/adamw beta1")
      ("beta2", number(out.beta2), "adam/adamw beta2")
      ("eps", number(out.eps), "adam/adamw epsilon")
      ("weight-decay", number(out.weight_decay),
       "L2 (sgd, adam) or decoupled (adamw) weight decay")
      ("decay-rule", choice(out.decay_rule, to_string(out.decay_rule), parse_decay_rule),
       "which tensors --weight-decay applies to: matrices (the weights of linear and conv layers; not biases, "
       "norms, embeddings) | all; a model file node's decay=true|false overrides it for its tensors")
      ("grad-clip", number(out.grad_clip),
       "clip each step's mean gradient to this global L2 norm (torch.nn.utils.clip_grad_norm_: scaled by "
       "min(1, MAX / (norm + 1e-6))); 0: off. --sync-mode sync or backup:B; each PS then applies a step only "
       "once all of its blocks are in")
      ("lr-schedule", choice(out.schedule.kind, optim::to_string(out.schedule.kind), optim::parse_lr_schedule),
       "constant | step | cosine")
      ("warmup-steps", po::value<std::int64_t>(&out.schedule.warmup_steps)->default_value(out.schedule.warmup_steps),
       "linear warmup steps")
      ("lr-decay-steps", po::value<std::int64_t>(&out.schedule.decay_steps)->default_value(out.schedule.decay_steps),
       "step schedule: decay every N steps")
      ("lr-decay-rate", number(out.schedule.decay_rate),
       "step schedule: multiply the lr by this")
      ("min-lr", number(out.schedule.min_lr),
       "cosine schedule: final learning rate")
      ("cosine-steps", po::value<std::int64_t>(&out.schedule.total_steps)->default_value(out.schedule.total_steps),
       "cosine schedule: the step at which the lr reaches --min-lr, and stays there (nanoGPT's lr_decay_iters); "
       "0: the run's total steps");
  // clang-format on
  return d;
}

po::parsed_options parse_flags(int argc, char** argv, const po::options_description& desc) {
  po::parsed_options parsed = po::command_line_parser(argc, argv).options(desc).run();
  for (const po::option& o : parsed.options)
    if (o.position_key >= 0 || o.string_key.empty())
      throw ConfigError(
          str("unexpected argument '", o.original_tokens.empty() ? std::string() : o.original_tokens.front(),
              "': options only (--name value or --name=value); a value with spaces needs quotes; see --help"));
  keep_last_occurrence(parsed);
  return parsed;
}

po::variables_map parse_command_line(int argc, char** argv, const po::options_description& desc) {
  po::variables_map vm;
  try {
    po::store(parse_flags(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(str(po_error_message(e), "; see --help"));
  }
  return vm;
}

}  // namespace drt::train
