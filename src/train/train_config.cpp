#include "drtrain/train/train_config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "drtrain/backend/backend.hpp"
#include "drtrain/config.hpp"
#include "drtrain/core/choices.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/stop_signals.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/preprocess.hpp"
#include "drtrain/nn/model_spec.hpp"

namespace drt::train {

namespace {

po::options_description training_options(TrainConfig& c, std::string& config_file) {
  po::options_description d("Training");
  // One option a line (clang-format 14 runs add_options() chains together).
  // clang-format off
  d.add_options()
      ("config", po::value<std::string>(&config_file), "INI file with any of these options (key = value); "
       "the command line wins")
      ("model", po::value<std::string>(&c.model)->default_value(c.model), "a preset (mlp, cnn, resnet20, gpt2), mlp:IN-H1-...-OUT, gpt:L-H-D[-C] (L blocks, H heads, D wide, context C), or a model file (docs/MODEL_FORMAT.md)")
      ("dataset", po::value<std::string>(&c.dataset)->default_value(c.dataset), "fashion-mnist | synthetic | hdf5")
      ("data-dir", po::value<std::string>(&c.data_dir)->default_value(c.data_dir),
       "directory with the Fashion-MNIST IDX .gz files (Debian package dataset-fashion-mnist)")
      ("data-file", po::value<std::string>(&c.data_file)->default_value(c.data_file),
       "--dataset hdf5: the data set file (docs/DATA_FORMAT.md; make one with drtrain-data), its /train and /test")
      ("test-file", po::value<std::string>(&c.test_file)->default_value(c.test_file),
       "--dataset hdf5: take /test from this file instead of --data-file")
      ("context", po::value<int>(&c.context)->default_value(c.context),
       "a token data set (language models): tokens per sample, the window T a sample and its T next-token "
       "targets are cut from")
      ("augment", po::value<std::string>(&c.augment)->default_value(c.augment),
       "training augmentation: none, or crop:PAD and/or flip (e.g. crop:4,flip), drawn per (seed, epoch, sample)")
      ("normalize", po::value<std::string>(&c.normalize)->default_value(c.normalize),
       "per-channel (x - mean) / std: none, stored (the data file's), or MEAN,.../STD,...")
      ("synthetic-train", po::value<int>(&c.synthetic_train)->default_value(c.synthetic_train),
       "training images of --dataset synthetic")
      ("synthetic-test", po::value<int>(&c.synthetic_test)->default_value(c.synthetic_test),
       "test images of --dataset synthetic")
      ("synthetic-shape", po::value<std::string>(&c.synthetic_shape)->default_value(c.synthetic_shape),
       "C x H x W of --dataset synthetic images")
      ("test-samples", po::value<int>(&c.test_samples)->default_value(c.test_samples),
       "evaluate on the first N test images only (0: all of them)")
      ("epochs", po::value<int>(&c.epochs)->default_value(c.epochs), "passes over the training set")
      ("max-steps", po::value<std::int64_t>(&c.max_steps)->default_value(c.max_steps),
       "stop after this many steps (0: no limit)")
      ("batch-size", po::value<int>(&c.batch_size)->default_value(c.batch_size),
       "global batch = workers x towers x per-tower batch")
      ("towers", po::value<int>(&c.towers)->default_value(c.towers),
       "model replicas per worker (with --device cuda: GPUs per worker)")
      ("device", po::value<std::string>(&c.device)->default_value(c.device),
       "auto | cpu | cuda: where workers train (auto: cuda when a GPU is visible, else cpu)")
      ("cuda-tf32", on_off(c.cuda_tf32),
       "allow TF32 tensor cores in cuBLAS and cuDNN (faster; ~1e-3 relative error)")
      ("cuda-debug-sync", on_off(c.cuda_debug_sync),
       "wait for the GPU after every CUDA call, so errors name the call that caused them (slow)")
      ("cpu-gemm", po::value<std::string>(&c.cpu_gemm)->default_value(c.cpu_gemm),
       "auto | openblas | onednn: the library of CPU towers' matrix products (auto: oneDNN when drtrain is built "
       "with it, whose JIT kernels use AVX-512 where the CPU has it; else OpenBLAS)")
      ("seed", po::value<std::uint64_t>(&c.seed)->default_value(c.seed), "initial weights and data order")
      ("metrics", po::value<std::string>(&c.metrics)->default_value(c.metrics),
       "write JSON lines (progress, evaluation, summary) to this file")
      ("timeline", po::value<std::string>(&c.timeline)->default_value(c.timeline),
       "write a Chrome trace (chrome://tracing, ui.perfetto.dev) of every rank's phases to this file")
      ("stop-signals", po::value<std::string>(&c.stop_signals)->default_value(c.stop_signals),
       "signals that stop training at the next step boundary on every rank, after a checkpoint, with exit status 75 "
       "(comma-separated, e.g. TERM,USR1; none: the default actions)")
      ("timeline-max-spans", po::value<std::size_t>(&c.timeline_max_spans)->default_value(c.timeline_max_spans),
       "--timeline: spans each rank keeps (its first ones; about 40 bytes each); later ones are counted as dropped")
      ("log-every", po::value<int>(&c.log_every)->default_value(c.log_every), "steps between progress lines")
      ("peak-tflops", number(c.peak_tflops),
       "the peak TFLOP/s of one tower's device at the precision trained (e.g. 989 for an H100 SXM's dense bf16): "
       "language models then report MFU, model FLOP/s over the towers' peak (0: no MFU)")
      ("threads", po::value<int>(&c.threads)->default_value(c.threads),
       "BLAS threads per worker (0: cores on the node / workers on the node)")
      ("overlap", on_off(c.overlap),
       "overlap the exchange with compute on a worker thread: push gradients during backward, pull "
       "parameters during the next forward (CPU or GPU towers, --rma-sync passive, --sync-mode sync; see "
       "docs/EXCHANGE.md, \"Overlapping the exchange with compute\", for where it is faster)")
      ("straggler", po::value<std::string>(&c.straggler)->default_value(c.straggler),
       "experiments only: W:F makes worker W sleep after each step's compute so that its steps take about F "
       "times as long (e.g. 3:3), to measure --sync-mode against a slow worker")
      ("bucket-kib", po::value<std::size_t>(&c.bucket_kib)->default_value(c.bucket_kib),
       "--overlap: gradients leave in buckets of whole layers of at least this many KiB")
      ("eval", on_off(c.eval), "evaluate on the test set after every epoch and at the end")
      ("eval-every", po::value<std::int64_t>(&c.eval_every)->default_value(c.eval_every),
       "also evaluate every this many steps (0: at epoch ends only); each evaluation's metrics record has "
       "the seconds since training started (time to accuracy)")
      ("checkpoint-dir", po::value<std::string>(&c.checkpoint_dir)->default_value(c.checkpoint_dir),
       "write HDF5 checkpoints here (one at the end, more with --checkpoint-every/-secs); one job at a time, and a "
       "run from scratch needs a directory without checkpoints")
      ("checkpoint-every", po::value<std::int64_t>(&c.checkpoint_every)->default_value(c.checkpoint_every),
       "steps between checkpoints (0: none)")
      ("checkpoint-secs", number(c.checkpoint_secs),
       "seconds between checkpoints (0: none)")
      ("checkpoint-start", on_off(c.checkpoint_start),
       "with --checkpoint-dir, a run from scratch also saves its initial state (ckpt-00000000.h5: the initial "
       "parameters and zero optimizer state) before its first step; a resumed run starts from a checkpoint already")
      ("keep", po::value<int>(&c.keep)->default_value(c.keep),
       "newest checkpoints of this run's line to keep (other runs' files are never removed)")
      ("checkpoint-async", on_off(c.checkpoint_async),
       "write checkpoints during training in the background from a snapshot of each PS's shard (training "
       "pauses only for the copy; costs one more copy of the parameters and optimizer state on each PS); "
       "false: training waits for each save")
      ("resume", po::value<std::string>(&c.resume)->implicit_value("latest"),
       "continue the run that wrote last in --checkpoint-dir from its newest valid checkpoint (--resume), or "
       "from a file (--resume FILE)");
  // clang-format on
  return d;
}

// Where each option given was set: "the command line" or "--config FILE" (the command line wins).
using Origins = std::map<std::string, std::string>;

// For an error about options, where those that came from the INI file were set (the others came
// from the command line or are defaults): " (--epochs, --lr: from --config run.ini)"; empty if none.
std::string from_config_file(const std::string& message, const Origins& origins) {
  std::vector<std::string> named;
  std::string file;
  for (std::size_t at = message.find("--"); at != std::string::npos; at = message.find("--", at + 2)) {
    std::size_t end = at + 2;
    while (end < message.size() && (std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '-'))
      ++end;
    const auto it = origins.find(message.substr(at + 2, end - at - 2));
    const std::string flag = message.substr(at, end - at);
    if (it == origins.end() || it->second.rfind("--config ", 0) != 0) continue;
    if (std::find(named.begin(), named.end(), flag) == named.end()) named.push_back(flag);
    file = it->second;
  }
  return named.empty() ? std::string() : str(" (", join(named, ", "), ": from ", file, ")");
}

// A --grad-push given (on the command line or in an INI) that another setting overrides is an
// error naming both and where each came from, not a setting silently ignored (an INI's
// "deterministic = true" with "--grad-push accumulate" on the command line trained with slots).
void check_grad_push_given(const TrainConfig& c, const po::variables_map& vm, const Origins& origins) {
  if (vm["grad-push"].defaulted() || c.exchange.grad_push() == c.exchange.push) return;
  const auto from = [&origins](const std::string& key) {
    const auto it = origins.find(key);
    return it == origins.end() ? std::string("default") : it->second;
  };
  std::string other;
  std::string fix;
  if (c.exchange.deterministic) {
    other = str("--deterministic (", from("deterministic"), ")");
    fix = "--deterministic false, or drop --grad-push";
  } else if (c.exchange.wire == ps::Wire::kBf16) {
    other = str("--wire bf16 (", from("wire"), ")");
    fix = "--wire fp32, or drop --grad-push";
  } else {
    other = str("--sync-mode ", ps::to_string(c.exchange.mode), " (", from("sync-mode"), ")");
    fix = "--sync-mode sync, or drop --grad-push";
  }
  throw ConfigError(str("--grad-push ", ps::to_string(c.exchange.push), " (", from("grad-push"), ") contradicts ",
                        other, ", which pushes gradients into per-worker slots (--grad-push slots); pass ", fix));
}

const char* kVersionText = "drtrain " DRT_VERSION_STRING " (CUDA backend: "
#if DRT_HAVE_CUDA
                           "built"
#else
                           "not built"
#endif
                           ")";

}  // namespace

nn::ModelGraph TrainConfig::load_model() const {
  if (model_graph) return *model_graph;
  return nn::ModelGraph::load(model);
}

std::array<int, 3> TrainConfig::synthetic_dims() const {
  const std::vector<std::string> parts = split_list(synthetic_shape, 'x');
  std::array<int, 3> dims{};
  bool ok = parts.size() == 3;
  for (std::size_t i = 0; ok && i < 3; ++i) {
    ok = !parts[i].empty() && parts[i].size() <= 4 && parts[i].find_first_not_of("0123456789") == std::string::npos;
    if (ok) dims[i] = std::stoi(parts[i]);
    ok = ok && dims[i] >= 1;
  }
  if (!ok) throw ConfigError(str("--synthetic-shape '", synthetic_shape, "': use CxHxW, e.g. 3x32x32 (each 1..4096)"));
  return dims;
}

TrainConfig::Straggler TrainConfig::parse_straggler() const {
  Straggler s;
  if (straggler.empty()) return s;
  const std::size_t colon = straggler.find(':');
  const std::string worker = colon == std::string::npos ? straggler : straggler.substr(0, colon);
  const std::string factor = colon == std::string::npos ? std::string() : straggler.substr(colon + 1);
  char* end = nullptr;
  const double f = factor.empty() ? 0.0 : std::strtod(factor.c_str(), &end);
  const bool ok = !worker.empty() && worker.size() <= 6 &&
                  worker.find_first_not_of("0123456789") == std::string::npos && end != nullptr && *end == '\0' &&
                  f >= 1.0 && f <= 1000.0;
  if (!ok)
    throw ConfigError(str("--straggler '", straggler,
                          "': use WORKER:FACTOR, e.g. 3:3 (worker 3's steps take about 3x as long; factor 1..1000)"));
  s.worker = std::stoi(worker);
  s.factor = f;
  return s;
}

void TrainConfig::validate() const {
  load_model();  // the shapes are checked once the data set's are known
  if (dataset != "fashion-mnist" && dataset != "synthetic" && dataset != "hdf5")
    throw ConfigError(str("unknown --dataset '", dataset, "'; choices: fashion-mnist, synthetic, hdf5"));
  if (dataset == "hdf5" && data_file.empty())
    throw ConfigError("--dataset hdf5 needs --data-file FILE (an HDF5 data set: drtrain-data convert makes one)");
  if (dataset != "hdf5" && (!data_file.empty() || !test_file.empty()))
    throw ConfigError(str("--data-file and --test-file are for --dataset hdf5 (this run: --dataset ", dataset, ")"));
  if (synthetic_train < 1 || synthetic_test < 0)
    throw ConfigError("--synthetic-train must be >= 1 and --synthetic-test >= 0");
  synthetic_dims();                   // ConfigError for a bad --synthetic-shape
  data::parse_augmentation(augment);  // ConfigError naming --augment
  if (normalize != "none" && normalize != "stored" && normalize.find('/') == std::string::npos)
    throw ConfigError(
        str("--normalize '", normalize, "': use none, stored, or MEAN,.../STD,... (one of each per channel)"));
  if (test_samples < 0) throw ConfigError(str("--test-samples must be >= 0 (0: all), got ", test_samples));
  if (context < 0) throw ConfigError(str("--context must be >= 1 for a token data set (0: not set), got ", context));
  if (context > 0 && dataset != "hdf5")
    throw ConfigError(str("--context is for token data sets (--dataset hdf5 --data-file TOKENS.h5); this run has "
                          "--dataset ",
                          dataset));
  if (epochs < 1) throw ConfigError(str("--epochs must be at least 1 (got ", epochs, ")"));
  if (max_steps < 0) throw ConfigError(str("--max-steps must be >= 0 (got ", max_steps, ")"));
  if (batch_size < 1) throw ConfigError(str("--batch-size must be at least 1 (got ", batch_size, ")"));
  if (towers < 1) throw ConfigError(str("--towers must be at least 1 (got ", towers, ")"));
  if (device != "auto" && device != "cpu" && device != "cuda")
    throw ConfigError(str("unknown --device '", device, "'; choices: auto, cpu, cuda"));
  backend::parse_cpu_gemm(cpu_gemm, "--cpu-gemm");  // ConfigError naming the flag
  if (log_every < 1) throw ConfigError(str("--log-every must be at least 1 (got ", log_every, ")"));
  if (!(peak_tflops >= 0.0) || !std::isfinite(peak_tflops))
    throw ConfigError(str("--peak-tflops must be a finite number >= 0 (TFLOP/s of one tower's device; 0: no MFU), got ",
                          peak_tflops));
  if (threads < 0) throw ConfigError(str("--threads must be >= 0 (got ", threads, ")"));
  if (bucket_kib < 1) throw ConfigError("--bucket-kib must be at least 1");
  if (eval_every < 0) throw ConfigError(str("--eval-every must be >= 0 (got ", eval_every, "; 0: at epoch ends only)"));
  if (checkpoint_every < 0 || checkpoint_secs < 0)
    throw ConfigError("--checkpoint-every and --checkpoint-secs must be >= 0");
  if ((checkpoint_every > 0 || checkpoint_secs > 0) && checkpoint_dir.empty())
    throw ConfigError("--checkpoint-every/--checkpoint-secs need --checkpoint-dir DIR");
  if (checkpoint_start && checkpoint_dir.empty()) throw ConfigError("--checkpoint-start needs --checkpoint-dir DIR");
  parse_stop_signals(stop_signals);  // ConfigError naming a bad entry
  parse_straggler();                 // ConfigError naming --straggler
  if (keep < 1) throw ConfigError(str("--keep must be at least 1 (got ", keep, ")"));
  if (resume == "latest" && checkpoint_dir.empty())
    throw ConfigError("--resume without a file needs --checkpoint-dir DIR (or pass --resume FILE)");
  exchange.validate();
  if (exchange.lookahead.kind == ps::Lookahead::Kind::kFixed && !optimizer.has_momentum_buffer())
    throw ConfigError(str("--lookahead ", ps::to_string(exchange.lookahead),
                          " extrapolates along SGD's momentum buffer; it needs --optimizer sgd with --momentum above 0 "
                          "(this run: ",
                          optimizer.describe(), ")"));
  if (optimizer.grad_clip > 0.0 && exchange.mode.per_gradient())
    throw ConfigError(str("--grad-clip ", optimizer.grad_clip,
                          " needs --sync-mode sync or backup:B (this run: ", ps::to_string(exchange.mode),
                          "): under ssp and async each worker's gradient is applied on its own as it arrives, so "
                          "there is no step's mean gradient to take the norm of, and a norm per gradient would need "
                          "every PS to agree on it before applying, the synchronisation those modes drop; "
                          "use --grad-clip 0 or another --sync-mode"));
  optim::OptimizerConfig resolved = optimizer;
  if (resolved.schedule.total_steps == 0)
    resolved.schedule.total_steps = resolved.schedule.warmup_steps + 1;  // per run
  resolved.validate();
}

std::string TrainConfig::to_ini() const {
  std::ostringstream o;
  o << "# drtrain configuration (drtrain --print-config); load with --config FILE\n"
    << "model = " << model << "\ndataset = " << dataset << "\ndata-dir = " << data_dir << "\ndata-file = " << data_file
    << "\ntest-file = " << test_file << "\ncontext = " << context << "\naugment = " << augment
    << "\nnormalize = " << normalize << "\nsynthetic-train = " << synthetic_train
    << "\nsynthetic-test = " << synthetic_test << "\nsynthetic-shape = " << synthetic_shape
    << "\ntest-samples = " << test_samples << "\nepochs = " << epochs << "\nmax-steps = " << max_steps
    << "\nbatch-size = " << batch_size << "\ntowers = " << towers << "\ndevice = " << device
    << "\ncuda-tf32 = " << (cuda_tf32 ? "true" : "false")
    << "\ncuda-debug-sync = " << (cuda_debug_sync ? "true" : "false") << "\ncpu-gemm = " << cpu_gemm
    << "\nseed = " << seed << "\nmetrics = " << metrics << "\ntimeline = " << timeline
    << "\ntimeline-max-spans = " << timeline_max_spans << "\nstop-signals = " << stop_signals
    << "\nlog-every = " << log_every << "\npeak-tflops = " << shortest(peak_tflops) << "\nthreads = " << threads
    << "\noverlap = " << (overlap ? "true" : "false") << "\nbucket-kib = " << bucket_kib
    << "\nstraggler = " << straggler << "\neval = " << (eval ? "true" : "false") << "\neval-every = " << eval_every
    << "\ncheckpoint-dir = " << checkpoint_dir << "\ncheckpoint-every = " << checkpoint_every
    << "\ncheckpoint-secs = " << shortest(checkpoint_secs) << "\nkeep = " << keep
    << "\ncheckpoint-start = " << (checkpoint_start ? "true" : "false")
    << "\ncheckpoint-async = " << (checkpoint_async ? "true" : "false")
    << (resume.empty() ? std::string() : "\nresume = " + resume)
    << "\n\n# layout and exchange\nnum-ps = " << layout.num_ps
    << "\nps-placement = " << comm::to_string(layout.placement) << "\nexpect-ranks = " << layout.expect_ranks
    << "\nsync-mode = " << ps::to_string(exchange.mode) << "\nlookahead = " << ps::to_string(exchange.lookahead)
    << "\nrma-sync = " << ps::to_string(exchange.sync) << "\ngrad-push = " << ps::to_string(exchange.grad_push())
    << "\ndeterministic = " << (exchange.deterministic ? "true" : "false")
    << "\nwire = " << ps::to_string(exchange.wire) << "\nshard-plan = " << ps::to_string(exchange.plan)
    << "\nrma-chunk-kib = " << exchange.chunk_bytes / 1024 << "\nhang-timeout = " << shortest(exchange.hang_timeout_s)
    << "\n\n# optimizer\noptimizer = " << optim::to_string(optimizer.kind) << "\nlr = " << shortest(optimizer.lr)
    << "\nmomentum = " << shortest(optimizer.momentum) << "\nnesterov = " << (optimizer.nesterov ? "true" : "false")
    << "\nbeta1 = " << shortest(optimizer.beta1) << "\nbeta2 = " << shortest(optimizer.beta2)
    << "\neps = " << shortest(optimizer.eps) << "\nweight-decay = " << shortest(optimizer.weight_decay)
    << "\ndecay-rule = " << to_string(optimizer.decay_rule) << "\ngrad-clip = " << shortest(optimizer.grad_clip)
    << "\nlr-schedule = " << optim::to_string(optimizer.schedule.kind)
    << "\nwarmup-steps = " << optimizer.schedule.warmup_steps << "\nlr-decay-steps = " << optimizer.schedule.decay_steps
    << "\nlr-decay-rate = " << shortest(optimizer.schedule.decay_rate)
    << "\nmin-lr = " << shortest(optimizer.schedule.min_lr) << "\ncosine-steps = " << optimizer.schedule.total_steps
    << "\n";
  return o.str();
}

std::optional<TrainConfig> parse_train_config(int argc, char** argv, bool print) {
  TrainConfig c;
  std::string config_file;
  po::options_description general("General");
  // One option a line (clang-format 14 runs add_options() chains together).
  // clang-format off
  general.add_options()("help,h", "show this help and exit")("version", "show the version and exit")
      ("print-config", "print the resolved configuration as an INI file and exit")
      ("check", "work the job out on one process, without mpirun, and exit: the configuration, the model built for "
       "the data set's shape, the layout, the parameter count and each role's memory (exit 1 when a node could "
       "not hold it); the job's size: --expect-ranks N, or the ranks mpirun gives, or --num-ps + 1")
      ("dry-run", "the same as --check");
  // clang-format on
  po::options_description all(
      "drtrain: synchronous data-parallel training with sharded parameter servers over MPI RMA\n"
      "usage: mpirun -n N drtrain [options]");
  all.add(general)
      .add(training_options(c, config_file))
      .add(layout_options(c.layout))
      .add(exchange_options(c.exchange))
      .add(optimizer_options(c.optimizer));
  po::variables_map vm;
  Origins origins;
  try {
    const po::parsed_options flags = parse_flags(argc, argv, all);
    for (const po::option& o : flags.options) origins[o.string_key] = "the command line";
    po::store(flags, vm);
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream file(path);
      if (!file) throw ConfigError(str("--config ", path, ": cannot open the file"));
      try {
        po::parsed_options ini = po::parse_config_file(file, all);
        keep_last_occurrence(ini);  // a key set twice in the file: its last line wins
        for (const po::option& o : ini.options) origins.emplace(o.string_key, "--config " + path);
        po::store(ini, vm);  // values already set by the command line stay
      } catch (const po::error& e) {
        throw ConfigError(str("--config ", path, ": ", po_error_message(e)));
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(str(po_error_message(e), "; see --help"));
  }
  if (vm.count("help")) {
    if (print) std::cout << all << "\n";
    return std::nullopt;
  }
  if (vm.count("version")) {
    if (print) std::cout << kVersionText << "\n";
    return std::nullopt;
  }
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(str(e.what(), from_config_file(e.what(), origins)));
  }
  check_grad_push_given(c, vm, origins);
  c.check = vm.count("check") > 0 || vm.count("dry-run") > 0;
  if (vm.count("print-config")) {
    if (print) std::cout << c.to_ini();
    return std::nullopt;
  }
  return c;
}

}  // namespace drt::train
