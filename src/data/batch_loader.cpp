#include "drtrain/data/batch_loader.hpp"

#include <optional>
#include <utility>

#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {

namespace {

// Checks `config` against `source` and returns it; runs in the member initialiser list, so a
// bad configuration throws before the producer thread starts.
LoaderConfig validated(const SampleSource& source, const LoaderConfig& config) {
  // Validates count, global_batch, workers and towers (with the --batch-size message).
  const EpochPlan plan(static_cast<int>(source.info().count), config.global_batch, config.workers, config.towers,
                       config.seed, config.first_epoch);
  if (config.worker < 0 || config.worker >= config.workers)
    throw ConfigError(str("worker index ", config.worker, " is outside 0..", config.workers - 1));
  if (config.first_step < 0 || config.first_step >= plan.steps())
    throw ConfigError(str("the first step ", config.first_step, " is outside the ", plan.steps(),
                          " steps of an epoch (", source.info().count, " samples at batch size ", config.global_batch,
                          ")"));
  if (config.total_steps < 0)
    throw ConfigError(str("the total number of steps must be >= 0 (got ", config.total_steps, ")"));
  if (config.depth < 1) throw ConfigError(str("the loader queue depth must be >= 1 (got ", config.depth, ")"));
  if (source.info().tokens && (config.augment.any() || config.normalize.any()))
    throw ConfigError(
        str(source.info().name, " holds windows of tokens: --augment and --normalize apply to images only"));
  if (config.normalize.any() && config.normalize.mean.size() != static_cast<std::size_t>(source.info().channels))
    throw ConfigError(
        str("the normalisation has ", config.normalize.mean.size(), " channels, the data ", source.info().channels));
  return config;
}

}  // namespace

TowerBatch read_tower_batch(SampleSource& source, const std::vector<int>& samples, const Normalization& normalize) {
  const SourceInfo& info = source.info();
  TowerBatch batch;
  batch.count = static_cast<int>(samples.size());
  batch.images.resize(samples.size() * info.sample_floats());
  batch.labels.resize(samples.size() * static_cast<std::size_t>(info.targets));
  source.read(std::vector<std::int64_t>(samples.begin(), samples.end()), batch.images.data(), batch.labels.data());
  normalize_images(normalize, info.channels, static_cast<std::size_t>(info.height) * info.width, batch.images.data(),
                   samples.size());
  return batch;
}

BatchLoader::BatchLoader(SampleSource& source, const LoaderConfig& config)
    : source_(source), config_(validated(source, config)), thread_(&BatchLoader::produce, this) {}

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
    const SourceInfo& info = source_.info();
    const auto count = static_cast<int>(info.count);
    const std::size_t sample = info.sample_floats();
    const auto targets = static_cast<std::size_t>(info.targets);  // labels per sample
    const std::size_t plane = static_cast<std::size_t>(info.height) * static_cast<std::size_t>(info.width);
    std::vector<float> images, scratch(plane);
    std::vector<std::int32_t> labels;
    std::vector<std::int64_t> indices;
    std::optional<EpochPlan> plan;  // EpochPlan has no default constructor
    plan.emplace(count, c.global_batch, c.workers, c.towers, c.seed, c.first_epoch);
    int step = c.first_step;
    for (std::int64_t made = 0; made < c.total_steps; ++made) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
      }
      if (step == plan->steps()) {  // past the epoch's last step: step 0 of the next epoch
        plan.emplace(count, c.global_batch, c.workers, c.towers, c.seed, plan->epoch() + 1);
        step = 0;
      }
      WorkerBatch batch;
      batch.epoch = plan->epoch();
      batch.step_in_epoch = step;
      batch.steps_in_epoch = plan->steps();
      batch.global_count = plan->batch_size(step);
      // All towers' samples in one read, then cut into the towers' batches.
      std::vector<std::vector<int>> parts;
      indices.clear();
      for (int t = 0; t < c.towers; ++t) {
        parts.push_back(plan->samples(step, c.worker, t));
        indices.insert(indices.end(), parts.back().begin(), parts.back().end());
      }
      images.resize(indices.size() * sample);
      labels.resize(indices.size() * targets);
      source_.read(indices, images.data(), labels.data());
      std::size_t at = 0;
      for (int t = 0; t < c.towers; ++t) {
        const std::vector<int>& part = parts[static_cast<std::size_t>(t)];
        TowerBatch tb;
        tb.count = static_cast<int>(part.size());
        tb.first = plan->part_begin(step, c.worker, t);
        tb.images.assign(images.begin() + static_cast<std::ptrdiff_t>(at * sample),
                         images.begin() + static_cast<std::ptrdiff_t>((at + part.size()) * sample));
        tb.labels.assign(labels.begin() + static_cast<std::ptrdiff_t>(at * targets),
                         labels.begin() + static_cast<std::ptrdiff_t>((at + part.size()) * targets));
        for (std::size_t i = 0; i < part.size(); ++i)
          augment_image(c.augment, c.seed, batch.epoch, part[i], info.channels, info.height, info.width,
                        tb.images.data() + i * sample, scratch.data());
        normalize_images(c.normalize, info.channels, plane, tb.images.data(), part.size());
        batch.towers.push_back(std::move(tb));
        at += part.size();
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
