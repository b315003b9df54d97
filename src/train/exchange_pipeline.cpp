#include "exchange_pipeline.hpp"

#include <algorithm>

#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::train {

ExchangePipeline::ExchangePipeline(ps::WorkerExchange& exchange, const std::vector<Range>& layers,
                                   std::size_t bucket_elems, const float* grads, float* params, Timeline& timeline)
    : exchange_(exchange),
      grads_(grads),
      params_(params),
      timeline_(timeline),
      ready_from_(exchange.total()),
      next_bucket_(0) {
  // Whole layers from the last backwards, each bucket at least bucket_elems long.
  std::size_t end = exchange.total(), expected = exchange.total();
  for (std::size_t i = layers.size(); i-- > 0;) {
    const Range& layer = layers[i];
    if (layer.first == layer.second) continue;
    DRT_ASSERT(layer.second == expected, "layer parameter ranges must tile the flat space");
    expected = layer.first;
    if (end - layer.first >= std::max<std::size_t>(1, bucket_elems)) {
      buckets_.emplace_back(layer.first, end);
      end = layer.first;
    }
  }
  DRT_ASSERT(expected == 0, "layer parameter ranges must start at 0");
  if (end > 0) buckets_.emplace_back(0, end);
  std::reverse(buckets_.begin(), buckets_.end());
  pulled_.assign(buckets_.size(), 0);
  thread_ = std::thread([this] { run(); });
}

ExchangePipeline::~ExchangePipeline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    tasks_.clear();  // after an error on the compute thread: nothing more is needed
  }
  wake_.notify_all();
  // The task in progress (if any: only when unwinding from an error) finishes or fails on its
  // own hang timeout; the watchdog covers an MPI call that never returns.
  thread_.join();
}

void ExchangePipeline::rethrow_if_failed() {
  if (failure_) std::rethrow_exception(failure_);
}

template <class Done>
void ExchangePipeline::wait_exposed(std::unique_lock<std::mutex>& lock, Done done, const char* span) {
  rethrow_if_failed();
  if (done()) return;
  const double t0 = now_seconds();
  wake_.wait(lock, [&] { return failure_ || done(); });
  const double t1 = now_seconds();
  exposed_s_ += t1 - t0;
  if (span) timeline_.span(span, t0, t1, step_);
  rethrow_if_failed();
}

void ExchangePipeline::begin_step(std::int64_t step) {
  std::unique_lock<std::mutex> lock(mutex_);
  step_ = step;
  wait_exposed(
      lock, [&] { return pushed_ >= wanted_version_; }, "wait for the push");
}

void ExchangePipeline::grads_ready(std::size_t begin, std::size_t end) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rethrow_if_failed();
    DRT_ASSERT(end == ready_from_ && begin <= end, "layer gradients must be reported last layer first, contiguously");
    ready_from_ = begin;
    bool queued = false;
    while (next_bucket_ < buckets_.size()) {
      const Range& bucket = buckets_[buckets_.size() - 1 - next_bucket_];
      if (bucket.first < ready_from_) break;
      tasks_.push_back({true, bucket, wanted_version_ + 1, step_});
      ++next_bucket_;
      queued = true;
    }
    if (!queued) return;
  }
  wake_.notify_all();
}

void ExchangePipeline::backward_done() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rethrow_if_failed();
    DRT_ASSERT(ready_from_ == 0 && next_bucket_ == buckets_.size(), "backward_done() before every layer reported");
    ++wanted_version_;
    tasks_.push_back({false, {0, exchange_.total()}, wanted_version_, step_});
    ready_from_ = exchange_.total();
    next_bucket_ = 0;
  }
  wake_.notify_all();
}

void ExchangePipeline::await_params(std::size_t begin, std::size_t end) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto in_place = [&] {
    for (std::size_t k = 0; k < buckets_.size(); ++k)
      if (buckets_[k].first < end && begin < buckets_[k].second && pulled_[k] < wanted_version_) return false;
    return true;
  };
  wait_exposed(lock, in_place, "wait for parameters");  // inside the forward's span
}

void ExchangePipeline::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_exposed(
      lock, [&] { return tasks_.empty() && !busy_; }, nullptr);  // the caller records its span
}

double ExchangePipeline::take_exposed_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(exposed_s_, 0.0);
}

ps::ExchangeTimes ExchangePipeline::take_times() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(times_, ps::ExchangeTimes{});
}

void ExchangePipeline::add_times(const ps::ExchangeTimes& t) {
  times_.push_s += t.push_s;
  times_.wait_s += t.wait_s;
  times_.pull_s += t.pull_s;
}

void ExchangePipeline::run() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopped
      task = tasks_.front();
      tasks_.pop_front();
      // Buckets queued meanwhile (backward outran the network) go out as one range: its chunks
      // round-robin over every PS they touch instead of one PS after the other.
      while (task.push && !tasks_.empty() && tasks_.front().push && tasks_.front().range.second == task.range.first) {
        task.range.first = tasks_.front().range.first;
        tasks_.pop_front();
      }
      busy_ = true;
    }
    try {
      if (task.push) push(task);
      else pull_all(task);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        failure_ = std::current_exception();
        busy_ = false;
      }
      wake_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
      add_times(exchange_.take_times());
    }
    wake_.notify_all();
  }
}

void ExchangePipeline::push(const Task& task) {
  const Range& range = task.range;
  if (gate_) {
    const double g0 = now_seconds();
    gate_(range.first, range.second);
    timeline_.span("gradient to host", g0, now_seconds(), task.step, Timeline::kExchangeTrack);
  }
  const double t0 = now_seconds();
  // The gradient buffer stays untouched until the next step's begin_step(), which waits for
  // finish_push(): by then every block is announced, so flushed (complete at the PS).
  if (!armed_) {  // the step's first push: published blocks travel back during the pushes
    exchange_.pull_during_push(params_);
    armed_ = true;
  }
  exchange_.push(grads_ + range.first, range.first, range.second - range.first);
  timeline_.span("push", t0, now_seconds(), task.step, Timeline::kExchangeTrack);
}

// Pulls every bucket (what the pushes did not already bring back), marking each as it lands: in
// forward order among those already published (the next forward needs the first layers first);
// when none is, it waits for the one published earliest, the highest (pushed first, since
// backward reports the last layers first).
void ExchangePipeline::pull_all(const Task& task) {
  const double t0 = now_seconds();
  exchange_.finish_push();
  timeline_.span("push", t0, now_seconds(), task.step, Timeline::kExchangeTrack);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pushed_ = task.version;  // every push of the step is complete: the gradient buffer is free
  }
  wake_.notify_all();
  armed_ = false;
  std::vector<std::size_t> left(buckets_.size());
  for (std::size_t k = 0; k < left.size(); ++k) left[k] = k;
  const auto pull = [&](std::size_t k) {
    const Range& b = buckets_[k];
    const double start = now_seconds();
    exchange_.pull(params_ + b.first, b.first, b.second - b.first).wait();
    timeline_.span("pull", start, now_seconds(), task.step, Timeline::kExchangeTrack);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pulled_[k] = task.version;
    }
    wake_.notify_all();
  };
  while (!left.empty()) {
    bool any = false;
    for (auto it = left.begin(); it != left.end();) {
      const Range& b = buckets_[*it];
      if (exchange_.published(b.first, b.second - b.first)) {
        pull(*it);
        it = left.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    if (!any) {
      pull(left.back());
      left.pop_back();
    }
  }
  if (after_pull_) after_pull_(task.step);
}

}  // namespace drt::train
