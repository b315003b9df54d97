// TrainConfig: everything a drtrain run is configured with, its defaults (in one place: the
// member initialisers), and the command line / INI file that fill it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "drtrain/nn/model_graph.hpp"
#include "drtrain/optim/optimizer.hpp"
#include "drtrain/ps/exchange_config.hpp"
#include "drtrain/train/cli_options.hpp"

namespace drt::train {

struct TrainConfig {
  // --model: a preset (models/*.model), mlp:IN-H1-...-OUT, or a model file (docs/MODEL_FORMAT.md).
  std::string model = "mlp";
  // A model built in C++ (nn::ModelGraph::add); when set it is trained instead of --model, whose
  // text then only names it in logs and checkpoints.
  std::shared_ptr<const nn::ModelGraph> model_graph;
  std::string dataset = "fashion-mnist";  // or "synthetic", "hdf5"
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string data_file;           // --dataset hdf5: the file with /train (and /test)
  std::string test_file;           // --dataset hdf5: /test from this file instead (optional)
  int context = 0;                 // token data sets: tokens per sample (the window T); 0: not set
  std::string augment = "none";    // data::parse_augmentation
  std::string normalize = "none";  // data::parse_normalization
  int synthetic_train = 60000;     // synthetic dataset sizes
  int synthetic_test = 10000;
  std::string synthetic_shape = "1x28x28";  // C x H x W of synthetic images
  int test_samples = 0;                     // evaluate on the first N test images (0: all)
  int epochs = 1;
  std::int64_t max_steps = 0;  // 0: no limit besides --epochs
  int batch_size = 128;        // global batch: workers x towers x per-tower batch
  int towers = 1;
  std::string device = "auto";    // auto (cuda when a GPU is visible, else cpu) | cpu | cuda
  bool cuda_tf32 = false;         // TF32 tensor cores in cuBLAS/cuDNN
  bool cuda_debug_sync = false;   // wait after every CUDA call (errors point at their call)
  std::string cpu_gemm = "auto";  // CPU towers' GEMM library: auto (oneDNN when built with it) | openblas | onednn
  LayoutOptions layout;
  ps::ExchangeConfig exchange;
  optim::OptimizerConfig optimizer;
  std::uint64_t seed = 1;
  std::string metrics;   // JSON lines file; empty: none
  std::string timeline;  // Chrome trace file; empty: none
  std::size_t timeline_max_spans = 200000;
  std::string stop_signals =
      "TERM,USR1";  // core/stop_signals.hpp; "none": default actions  // spans a rank keeps for --timeline (Timeline)
  int log_every = 50;  // steps between progress lines and metrics records
  // The peak FLOP/s of one tower's device in TFLOP/s (dense, at the precision trained): a
  // language model's progress lines, metrics and summary then give its MFU, the model FLOP/s
  // achieved over the peak of the towers that achieved them. 0: no MFU (drtrain does not guess).
  double peak_tflops = 0.0;
  int threads = 0;  // BLAS threads per worker; 0: cores on the node / workers on the node
  // Overlap the exchange with compute (a worker's exchange thread: push during backward, pull
  // during the next forward) where possible (CPU or GPU towers, --sync-mode sync, --rma-sync
  // passive, MPI with MPI_THREAD_SERIALIZED); off by default (docs/EXCHANGE.md, "Overlapping the exchange with
  // compute": where it pays).
  bool overlap = false;
  std::size_t bucket_kib = 4096;  // --overlap: the smallest gradient bucket pushed at once
  // An experiment knob, not for production: --straggler W:F makes worker W sleep (F - 1) x its
  // compute time after each step's compute, so that its steps take about F times as long
  // (docs/RELAXED_MODES.md, "Relaxed synchronisation"). Empty: none.
  std::string straggler;
  struct Straggler {
    int worker = -1;  // -1: none
    double factor = 1.0;
  };
  Straggler parse_straggler() const;  // ConfigError naming --straggler
  bool eval = true;                   // evaluate on the test set after every epoch
  std::int64_t eval_every = 0;        // and every this many steps (0: epochs only)
  std::string checkpoint_dir;         // empty: no checkpoints
  std::int64_t checkpoint_every = 0;  // steps between checkpoints (0: none)
  double checkpoint_secs = 0.0;       // seconds between checkpoints (0: none)
  int keep = 3;                       // newest checkpoints kept
  // A run from scratch also saves its initial state (ckpt-00000000.h5) before the first step.
  bool checkpoint_start = false;
  // Saves during training snapshot the PS's shard and write it on a thread while training goes
  // on (train/checkpointer.hpp); false: the serve loop writes (no snapshot memory).
  bool checkpoint_async = true;
  std::string resume;  // "": fresh start; "latest": newest valid in checkpoint_dir; else a file
  bool check = false;  // --check / --dry-run: work the job out and print it, train nothing (preflight.hpp)

  // Checks values that need no MPI (ranges, choices); ConfigError naming the flag.
  void validate() const;
  // The resolved configuration as an INI file that --config accepts.
  std::string to_ini() const;
  // The model to train: model_graph, or --model loaded (ConfigError for a bad one).
  nn::ModelGraph load_model() const;
  // --synthetic-shape as {C, H, W}; ConfigError for anything but three positive integers.
  std::array<int, 3> synthetic_dims() const;
};

// Parses the command line (and the --config INI file it names; the command line wins).
// Returns nullopt after --help, --version or --print-config, which `print` (rank 0) prints.
std::optional<TrainConfig> parse_train_config(int argc, char** argv, bool print);

}  // namespace drt::train
