// custom_model: a program of its own that defines a network in C++ (a small residual CNN with batch
// norm) through drtrain's public headers and trains it with parameter servers and workers, exactly
// as drtrain trains its presets. Start it like drtrain:
//   mpiexec -n 3 ./custom_model --num-ps 1 --dataset synthetic --max-steps 20     1 PS + 2 workers
//   mpiexec -n 3 ./custom_model --num-ps 1 --epochs 2 --channels 32 --blocks 3   Fashion-MNIST
// It takes every drtrain option (--help lists them) except --model, and adds two of its own:
// --channels N (the width, default 16) and --blocks N (residual blocks, default 2). The chief
// prints drtrain's usual report, then one line: "custom_model: trained S steps, final test
// accuracy A (loss L)".
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/backend/blas_kernels.hpp"
#include "drtrain/comm/mpi_session.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/nn/model_graph.hpp"
#include "drtrain/train/train_config.hpp"
#include "drtrain/train/trainer.hpp"

namespace {

struct ModelOptions {
  int channels = 16;
  int blocks = 2;
};

int positive_int(const std::string& flag, const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1 || value > 1024)
    throw drt::ConfigError("--" + flag + " must be a whole number in 1..1024 (got '" + text + "')");
  return static_cast<int>(value);
}

// Takes this program's options out of `args` (argv[0] first); what is left is drtrain's command
// line. A ConfigError (the same on every rank) makes run_mpi_main print it once and exit 2.
ModelOptions take_model_options(std::vector<char*>& args, bool print) {
  ModelOptions m;
  std::vector<char*> rest{args.front()};
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--model" || arg.rfind("--model=", 0) == 0)
      throw drt::ConfigError(
          "custom_model trains its own network: --model is not an option here (see --channels, --blocks)");
    if (arg == "--help" && print)
      std::printf("custom_model: drtrain's options (below, except --model) and\n"
                  "  --channels N  the network's width (16)\n  --blocks N    residual blocks (2)\n\n");
    int* target = arg == "--channels" ? &m.channels : arg == "--blocks" ? &m.blocks : nullptr;
    if (target == nullptr) {
      rest.push_back(args[i]);
      continue;
    }
    if (i + 1 == args.size()) throw drt::ConfigError(arg + " needs a value");
    *target = positive_int(arg.substr(2), args[++i]);
  }
  args = rest;
  return m;
}

// stem: 3x3 convolution, batch norm, ReLU, 2x2 max pooling; then `blocks` residual blocks (two 3x3
// convolutions with batch norm, an identity shortcut); global average pooling; a linear layer to
// the data set's classes. Shapes are checked against the data set before training starts.
drt::nn::ModelGraph residual_cnn(const ModelOptions& m) {
  const std::string width = std::to_string(m.channels);
  const std::map<std::string, std::string> conv3x3{{"out", width}, {"kernel", "3"}, {"pad", "1"}, {"bias", "false"}};
  drt::nn::ModelGraph g("custom_resnet");
  g.add("stem.conv", "conv2d", {drt::nn::ModelGraph::kInput}, conv3x3)
      .add("stem.bn", "batchnorm")
      .add("stem.relu", "relu")
      .add("stem.pool", "maxpool2d", {}, {{"kernel", "2"}});
  std::string x = "stem.pool";  // the block's input, and its shortcut
  for (int b = 0; b < m.blocks; ++b) {
    const std::string p = "block" + std::to_string(b) + ".";
    g.add(p + "conv1", "conv2d", {x}, conv3x3)
        .add(p + "bn1", "batchnorm")
        .add(p + "relu1", "relu")
        .add(p + "conv2", "conv2d", {}, conv3x3)
        .add(p + "bn2", "batchnorm")
        .add(p + "add", "add", {p + "bn2", x})
        .add(p + "relu2", "relu");
    x = p + "relu2";
  }
  g.add("pool", "global_avgpool").add("fc", "linear", {}, {{"out", "classes"}});
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  drt::backend::ensure_blas_kernels(argv);  // before MPI_Init: may re-execute the program
  return drt::comm::run_mpi_main(argc, argv, "custom_model", [](drt::comm::MpiSession& session, int n, char** a) {
    const bool rank0 = session.world_rank() == 0;
    std::vector<char*> args(a, a + n);
    const ModelOptions m = take_model_options(args, rank0);
    args.push_back(nullptr);  // argv's terminator
    auto config = drt::train::parse_train_config(static_cast<int>(args.size()) - 1, args.data(), rank0);
    if (!config) return 0;            // --help, --version, --print-config
    config->model = "custom_resnet";  // names it in the logs and checkpoints
    config->model_graph = std::make_shared<drt::nn::ModelGraph>(residual_cnn(m));

    drt::train::TrainOutputs out;
    const int status = drt::train::run_training(*config, &out);  // on every rank: PS and workers
    if (out.chief) {
      if (config->eval)
        std::printf("custom_model: trained %lld steps, final test accuracy %.4f (loss %.4f)\n",
                    static_cast<long long>(out.steps), out.test_accuracy, out.test_loss);
      else
        std::printf("custom_model: trained %lld steps (no evaluation: --eval false)\n",
                    static_cast<long long>(out.steps));
      std::fflush(stdout);
    }
    return status;
  });
}
