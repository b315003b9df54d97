// ExchangePipeline (--overlap): a worker's exchange on a thread of its own, so that gradients
// leave while backward still runs and the next forward starts before the last parameters are in.
//
//   compute thread                              exchange thread (the only one calling MPI meanwhile)
//   backward of layer k -> grads_ready(range)   wait for the range on the host (the gate: GPU
//                                               towers copy it there asynchronously), then
//                                               push every complete bucket (queued ones merged
//                                               into one range: round-robin over its PS); the
//                                               blocks the PS have already published come back
//                                               meanwhile (WorkerExchange::pull_during_push)
//   end of backward     -> backward_done()      finish_push, then pull every other bucket,
//                                               forward order first among those published
//   forward of layer k  -> await_params(range)  (blocks until the range's bucket is pulled)
//   before any other MPI call -> drain()        (returns once the thread is idle)
//
// Buckets are contiguous ranges of the flat space made of whole layers, from the last layer
// backwards, each at least `bucket_elems` long (the first bucket takes what is left). MPI must
// provide MPI_THREAD_SERIALIZED: the two threads hand MPI over through this class's mutex, never
// calling it at the same time. An exception on the exchange thread (a hang, an MPI error)
// is rethrown on the compute thread at its next call.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "drtrain/ps/worker_exchange.hpp"
#include "drtrain/train/timeline.hpp"

namespace drt::train {

class ExchangePipeline {
 public:
  using Range = std::pair<std::size_t, std::size_t>;  // [begin, end) in flat-space elements

  // layers: each layer's parameter range in forward order (empty ones allowed), tiling
  // [0, exchange.total()). grads / params: the worker's host buffers pushed from and pulled into.
  ExchangePipeline(ps::WorkerExchange& exchange, const std::vector<Range>& layers, std::size_t bucket_elems,
                   const float* grads, float* params, Timeline& timeline);
  // Stops the thread: queued tasks are dropped (callers drain() first on a normal end); a task in
  // progress, which is only possible when unwinding from an error, is waited for: it finishes or
  // fails on its own hang timeout, and the watchdog ends an MPI call that never returns.
  ~ExchangePipeline();
  ExchangePipeline(const ExchangePipeline&) = delete;
  ExchangePipeline& operator=(const ExchangePipeline&) = delete;

  // Compute thread, at the start of every step (before anything writes the gradient buffer):
  // waits until the previous step's push has completed, so its gradient may be overwritten. (A
  // forward waits for parameters anyway, which come after the push; a tower with no samples
  // writes its zero gradient without any forward.) `step` labels the timeline. Like
  // await_params, a wait shows on the compute thread's track ("wait for the push", "wait for
  // parameters").
  void begin_step(std::int64_t step);
  // Gradients of [begin, end) are final; layers arrive last first, contiguously.
  void grads_ready(std::size_t begin, std::size_t end);
  // Every layer has reported: the step's push ends and its pull starts.
  void backward_done();
  // Blocks until [begin, end) of the parameters of the last backward_done() step are in place.
  void await_params(std::size_t begin, std::size_t end);
  // Blocks until the exchange thread is idle (every pull done); the caller may call MPI after.
  void drain();

  // Runs on the exchange thread after each step's pull, with the step (e.g. to cast a vote while
  // the thread owns MPI). Set before the first step.
  void set_after_pull(std::function<void(std::int64_t step)> hook) { after_pull_ = std::move(hook); }

  // Runs on the exchange thread before it pushes [begin, end): blocks until that part of the
  // gradient is in the host buffer (GPU towers copy it there asynchronously; the timeline shows
  // the wait as "gradient to host"). Set before the first step, only where copies are
  // asynchronous.
  void set_gradient_gate(std::function<void(std::size_t begin, std::size_t end)> gate) { gate_ = std::move(gate); }

  const std::vector<Range>& buckets() const { return buckets_; }
  // Seconds the compute thread was blocked by the exchange (await_params, drain), since the
  // last call.
  double take_exposed_seconds();
  // The exchange's own times (push, wait, pull on the exchange thread), since the last call.
  ps::ExchangeTimes take_times();

 private:
  struct Task {
    bool push = true;  // else: finish the push and pull every bucket
    Range range;
    std::int64_t version = 0;  // the parameters' version this task leads to (1 + backward_done() calls)
    std::int64_t step = 0;     // training step, for the timeline
  };
  void run();  // the exchange thread
  void push(const Task& task);
  void pull_all(const Task& task);
  void rethrow_if_failed();  // with mutex_ held
  // Compute thread, `lock` held on mutex_: returns once done() (or rethrows the exchange thread's
  // failure); the time it waited counts as exposed and, when `span` names it, shows on the
  // compute thread's track, labelled with the current step.
  template <class Done>
  void wait_exposed(std::unique_lock<std::mutex>& lock, Done done, const char* span);
  void add_times(const ps::ExchangeTimes& t);

  ps::WorkerExchange& exchange_;
  std::vector<Range> buckets_;  // forward order
  const float* grads_;
  float* params_;
  Timeline& timeline_;
  std::function<void(std::int64_t)> after_pull_;
  std::function<void(std::size_t, std::size_t)> gate_;

  // Compute thread only.
  std::size_t ready_from_;           // [ready_from_, total) has reported this step
  std::size_t next_bucket_;          // buckets_[next_bucket_ ..] are queued (counted from the back)
  std::int64_t wanted_version_ = 0;  // backward_done() calls so far
  std::int64_t step_ = 0;

  std::mutex mutex_;
  std::condition_variable wake_;  // tasks for the thread / progress for the compute thread
  std::deque<Task> tasks_;
  bool busy_ = false;  // the thread is working on a task
  bool stop_ = false;
  std::exception_ptr failure_;
  std::vector<std::int64_t> pulled_;  // per bucket: the version in place (0: the initial pull)
  std::int64_t pushed_ = 0;           // finish_push() calls done

  bool armed_ = false;  // exchange thread: pull_during_push() done for the step being pushed
  ps::ExchangeTimes times_;
  double exposed_s_ = 0.0;
  std::thread thread_;
};

}  // namespace drt::train
