#include "drtrain/train/preflight.hpp"

#include <cstdio>
#include <string>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/epoch_plan.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "job.hpp"
#include "memory_estimate.hpp"

namespace drt::train {

int run_check(const TrainConfig& c, int world_rank, int world_size) {
  // The job's size: what the job script will say (--expect-ranks), the ranks this runs on, or
  // the smallest job (one worker).
  const int ranks = c.layout.expect_ranks > 0 ? c.layout.expect_ranks
                    : world_size > 1          ? world_size
                                              : c.layout.num_ps + 1;
  const std::string ranks_from = c.layout.expect_ranks > 0 ? "--expect-ranks"
                                 : world_size > 1          ? "the ranks mpirun started"
                                                  : "--num-ps + 1 worker; --expect-ranks N sets the job's size";
  const int workers = ranks - c.layout.num_ps;
  if (c.layout.num_ps < 1) throw ConfigError(str("--num-ps must be at least 1 (got ", c.layout.num_ps, ")"));
  if (workers < 1)
    throw ConfigError(str("--num-ps ", c.layout.num_ps, " leaves no worker of ", ranks, " ranks: pass --num-ps ",
                          ranks - 1, " or fewer, or more ranks"));
  const WorkerData d = open_worker_data(c);
  const data::SourceInfo& info = d.train->info();
  const nn::ModelSpec spec(c.load_model(), sample_shape(info.channels, info.height, info.width, info.tokens),
                           info.classes);
  const data::EpochPlan plan(static_cast<int>(info.count), c.batch_size, workers, c.towers, c.seed, 0);
  std::int64_t steps = static_cast<std::int64_t>(plan.steps()) * c.epochs;
  if (c.max_steps > 0) steps = std::min(steps, c.max_steps);
  const std::size_t params = spec.layout().total();
  const ps::ShardPlan shards = c.exchange.shard_plan_for(params, c.layout.num_ps, 1);

  MemoryInputs in;
  in.config = &c;
  in.spec = &spec;
  in.train_count = info.count;
  in.test_count = c.eval && d.test ? d.test->info().count : 0;
  in.sample_floats = spec.input().per_sample();
  in.targets = spec.input().positions();
  in.num_ps = c.layout.num_ps;
  in.num_workers = workers;
  in.largest_shard = shards.largest_shard();
  in.towers_on_gpu = c.device == "cuda";
  const MemoryEstimate e = estimate_memory(in);
  const double node = node_available_bytes() + e.resident;
  const double all = workers * e.worker_bytes() + c.layout.num_ps * e.ps_bytes();
  if (world_rank != 0) return node > 0 && all > node ? 1 : 0;

  std::printf("drtrain --check: worked out on one process; nothing is trained or written\n");
  std::printf("ranks     %d (%s): %d PS + %d worker(s) x %d tower(s)\n", ranks, ranks_from.c_str(), c.layout.num_ps,
              workers, c.towers);
  const std::string tested = c.eval ? str(in.test_count, " test") : std::string("no test (--eval false)");
  std::printf("data      %s: %lld train, %s samples of %dx%dx%d, %d %s\n", info.name.c_str(),
              static_cast<long long>(info.count), tested.c_str(), info.channels, info.height, info.width, info.classes,
              info.tokens ? "token ids" : "classes");
  std::printf("model     %s: %zu parameters (%s as float32); %s\n", c.model.c_str(), params,
              human_bytes(4.0 * static_cast<double>(params)).c_str(), spec.describe().c_str());
  std::printf("batch     %d = %d worker(s) x %d tower(s) x %d; %d steps per epoch, %lld steps in all\n", c.batch_size,
              workers, c.towers, c.batch_size / (workers * c.towers), plan.steps(), static_cast<long long>(steps));
  std::printf("shards    %d PS, the largest holds %zu parameters (--shard-plan %s)\n", c.layout.num_ps,
              shards.largest_shard(), ps::to_string(c.exchange.plan).c_str());
  std::printf("memory    per worker %s%s\n", MemoryEstimate::describe(e.worker).c_str(),
              e.towers_on_gpu ? " on the host; the towers' parameters and activations are in GPU memory" : "");
  std::printf("memory    per PS %s\n", MemoryEstimate::describe(e.ps).c_str());
  std::printf("memory    all %d ranks on one node: %s; this machine (%s) has %s available%s\n", ranks,
              human_bytes(all).c_str(), host_name().c_str(), node > 0 ? human_bytes(node).c_str() : "an unknown amount",
              node > 0 && all > node ? ": TOO LARGE, a training run on such a node is refused" : "");
  std::printf("          (an estimate: what a rank holds now, plus its big buffers; activations measured on 1 and 3 "
              "samples)\n");
  return node > 0 && all > node ? 1 : 0;
}

}  // namespace drt::train
