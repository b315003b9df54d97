// Writes small valid checkpoints with drtrain's own writer (io::write_checkpoint over a
// one-rank MPI_COMM_WORLD), as seeds for fuzz_checkpoint:
//   make_checkpoint_seeds OUT_DIR
// gives OUT_DIR/sgd.h5 (parameters only), OUT_DIR/momentum.h5 (one optimizer slot) and
// OUT_DIR/adam.h5 (two slots). Each holds a 2-tensor model of 10 floats and short metadata,
// so that the files stay a few KiB. scripts/fuzz_check.sh runs it; the copies in
// fuzz/corpus/checkpoint/ came from it.
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "drtrain/comm/comm.hpp"
#include "drtrain/core/param_layout.hpp"
#include "drtrain/io/checkpoint.hpp"
#include "drtrain/io/checkpoint_writer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_checkpoint_seeds OUT_DIR\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    const std::string out = argv[1];
    drt::ParamLayout layout;
    layout.add("fc.weight", {2, 4});
    layout.add("fc.bias", {2});
    const std::size_t n = layout.total();
    struct Seed {
      const char* file;
      const char* optimizer;
      std::vector<std::string> slots;
    };
    for (const Seed& s :
         {Seed{"sgd.h5", "sgd", {}}, Seed{"momentum.h5", "sgd", {"momentum"}}, Seed{"adam.h5", "adam", {"m", "v"}}}) {
      std::vector<float> params(n);
      for (std::size_t i = 0; i < n; ++i) params[i] = 0.25f * static_cast<float>(i) - 1.0f;
      std::vector<std::vector<float>> slots(s.slots.size(), std::vector<float>(n, 0.125f));
      drt::io::ShardView view = drt::io::ShardView::range(0, n, params.data());
      for (auto& v : slots) view.slots.push_back(v.data());
      drt::io::CheckpointMeta meta;
      meta.drtrain_version = "0.1.0";
      meta.step = 3;
      meta.epoch = 0;
      meta.step_in_epoch = 3;
      meta.samples_seen = 24;
      meta.global_batch = 8;
      meta.model = "mlp:4-2";
      meta.optimizer = s.optimizer;
      meta.optimizer_config = std::string(s.optimizer) + " lr=0.1";
      meta.num_ps = 1;
      meta.num_workers = 1;
      meta.towers = 1;
      meta.shard_boundaries = {0, n};
      meta.seed = 1;
      meta.config = "model = mlp:4-2\n";
      drt::io::write_checkpoint(drt::comm::Comm::world(), out + "/" + s.file, meta, layout, s.slots, view);
      drt::io::CheckpointFile check(out + "/" + s.file);
      check.verify();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_checkpoint_seeds: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
