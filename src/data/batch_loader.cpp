#include "drtrain/data/batch_loader.hpp"

#include <array>
#include <optional>
#include <utility>

#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {

namespace {

// Checks `config` against `dataset` and returns it; runs in the member initialiser list, so a
// bad configuration throws before the producer thread starts.
LoaderConfig validated(const Dataset& dataset, const LoaderConfig& config) {
  // Validates count, global_batch, workers and towers (with the --batch-size message).
  const EpochPlan plan(dataset.count, config.global_batch, config.workers, config.towers, config.seed,
                       config.first_epoch);
  if (config.worker < 0 || config.worker >= config.workers)
    throw ConfigError(str("worker index ", config.worker, " is outside 0..", config.workers - 1));
  if (config.first_step < 0 || config.first_step >= plan.steps())
    throw ConfigError(str("the first step ", config.first_step, " is outside the ", plan.steps(),
                          " steps of an epoch (", dataset.count, " samples at batch size ", config.global_batch, ")"));
  if (config.total_steps < 0)
    throw ConfigError(str("the total number of steps must be >= 0 (got ", config.total_steps, ")"));
  if (config.depth < 1) throw ConfigError(str("the loader queue depth must be >= 1 (got ", config.depth, ")"));
  return config;
}

}  // namespace

TowerBatch make_tower_batch(const Dataset& dataset, const std::vector<int>& samples) {
  const std::size_t size = dataset.image_size();
  if (dataset.count < 0 || dataset.pixels.size() < static_cast<std::size_t>(dataset.count) * size ||
      dataset.labels.size() < static_cast<std::size_t>(dataset.count))
    throw Error(str("dataset ", dataset.name, " is inconsistent: ", dataset.count, " images of ", dataset.rows, "x",
                    dataset.cols, " but ", dataset.pixels.size(), " pixel bytes and ", dataset.labels.size(),
                    " labels"));
  // x / 255 for every byte value, computed once (the same floats as dividing each pixel).
  static const std::array<float, 256> kScale = [] {
    std::array<float, 256> table{};
    for (int v = 0; v < 256; ++v) table[static_cast<std::size_t>(v)] = static_cast<float>(v) / 255.0f;
    return table;
  }();

  TowerBatch batch;
  batch.count = static_cast<int>(samples.size());
  batch.images.resize(samples.size() * size);
  batch.labels.resize(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const int index = samples[i];
    if (index < 0 || index >= dataset.count)
      throw Error(str("sample ", index, " is outside dataset ", dataset.name, " of ", dataset.count, " images"));
    const std::uint8_t* src = dataset.pixels.data() + static_cast<std::size_t>(index) * size;
    float* dst = batch.images.data() + i * size;
    for (std::size_t p = 0; p < size; ++p) dst[p] = kScale[src[p]];
    batch.labels[i] = dataset.labels[static_cast<std::size_t>(index)];
  }
  return batch;
}

BatchLoader::BatchLoader(const Dataset& dataset, const LoaderConfig& config)
    : dataset_(dataset), config_(validated(dataset, config)), thread_(&BatchLoader::produce, this) {}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();  // wakes a producer waiting for space
  if (thread_.joinable()) thread_.join();
}

void BatchLoader::produce() {
  try {
    const LoaderConfig& c = config_;
    std::optional<EpochPlan> plan;  // EpochPlan has no default constructor
    plan.emplace(dataset_.count, c.global_batch, c.workers, c.towers, c.seed, c.first_epoch);
    int step = c.first_step;
    for (std::int64_t made = 0; made < c.total_steps; ++made) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
      }
      if (step == plan->steps()) {  // past the epoch's last step: step 0 of the next epoch
        plan.emplace(dataset_.count, c.global_batch, c.workers, c.towers, c.seed, plan->epoch() + 1);
        step = 0;
      }
      WorkerBatch batch;
      batch.epoch = plan->epoch();
      batch.step_in_epoch = step;
      batch.steps_in_epoch = plan->steps();
      batch.global_count = plan->batch_size(step);
      for (int t = 0; t < c.towers; ++t) {
        batch.towers.push_back(make_tower_batch(dataset_, plan->samples(step, c.worker, t)));
        batch.towers.back().first = plan->part_begin(step, c.worker, t);
      }
      ++step;

      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || ready_.size() < static_cast<std::size_t>(c.depth); });
      if (stop_) return;
      ready_.push_back(std::move(batch));
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    changed_.notify_all();
  }
}

WorkerBatch BatchLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (delivered_ >= config_.total_steps)
    throw Error(str("BatchLoader::next(): all ", config_.total_steps, " batches were delivered already"));
  if (ready_.empty() && !error_) {
    const double start = now_seconds();
    changed_.wait(lock, [&] { return !ready_.empty() || error_; });
    wait_s_ += now_seconds() - start;
  }
  // Batches made before a failure are still delivered; the failure surfaces in their place.
  if (ready_.empty()) std::rethrow_exception(error_);
  WorkerBatch batch = std::move(ready_.front());
  ready_.pop_front();
  ++delivered_;
  changed_.notify_all();  // room for the producer
  return batch;
}

double BatchLoader::take_wait_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(wait_s_, 0.0);
}

}  // namespace drt::data
