// The GPU tower group: the T GPUs of one worker process, one NCCL communicator each, all made
// in this process by ncclCommInitAll.
//
// Step protocol (tower 0 is the root):
//   sum_gradients:   ncclReduce(sum) of every tower's gradient into tower 0, then a copy of the
//                    sum to pinned host memory, which MPI pushes to the PS shards.
//   load_parameters: a copy of the pulled parameters from pinned host memory into tower 0, then
//                    ncclBroadcast from tower 0 to the others.
// With --overlap the same happens layer by layer: each layer's reduce right after its backward,
// its copy to the host on a copy stream (events tell the exchange thread when it has landed),
// and each layer's parameters just before its forward.
// Why a reduce and not an all-reduce with ncclAvg: only tower 0's result leaves the GPUs (the
// others are overwritten by the broadcast after the pull), so the reduce moves about half the
// bytes; and the 1/(towers x batch) factor is already folded into each tower's loss gradient
// (towers.hpp), where it costs nothing, so the sum is the average.
#include "nccl_tower_group.hpp"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <set>

#include "drtrain/backend/cuda_backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "library_check.hpp"

namespace drt::backend {
namespace {

class NcclTowerGroup final : public TowerGroup {
 public:
  NcclTowerGroup(const std::vector<TowerSlot>& towers, std::size_t n) : towers_(towers), n_(n) {
    std::set<int> distinct;
    for (const TowerSlot& t : towers_) {
      devices_.push_back(cuda_device_of(*t.device));
      streams_.push_back(static_cast<cudaStream_t>(cuda_stream(*t.device)));
      distinct.insert(devices_.back());
    }
    if (distinct.size() != towers_.size())
      throw ConfigError(str("the ", towers_.size(), " GPU towers of a worker must be on distinct GPUs"));
    if (towers_.size() > 1) {
      comms_.resize(towers_.size());
      DRT_NCCL_CHECK(ncclCommInitAll(comms_.data(), static_cast<int>(comms_.size()), devices_.data()), nullptr);
    }
    cuda::use_device(devices_[0]);
    // Pinned host memory: the device copies are real asynchronous DMA, and MPI reads and writes
    // it like any host memory (Debian's Open MPI is not CUDA-aware, so device pointers never
    // reach MPI).
    DRT_CUDA_CHECK(cudaMallocHost(&grads_host_, n_ * sizeof(float)));
    DRT_CUDA_CHECK(cudaMallocHost(&params_host_, n_ * sizeof(float)));
    DRT_CUDA_CHECK(cudaEventCreateWithFlags(&grads_on_host_, cudaEventDisableTiming));
    DRT_CUDA_CHECK(cudaEventCreateWithFlags(&params_read_, cudaEventDisableTiming));
    DRT_CUDA_CHECK(cudaEventRecord(params_read_, streams_[0]));  // nothing reads the staging yet
    DRT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  }

  ~NcclTowerGroup() override {
    for (std::size_t t = 0; t < towers_.size(); ++t) {
      cudaSetDevice(devices_[t]);
      cudaStreamSynchronize(streams_[t]);
    }
    for (ncclComm_t c : comms_) ncclCommDestroy(c);
    cudaSetDevice(devices_[0]);
    cudaStreamSynchronize(copy_stream_);
    cudaStreamDestroy(copy_stream_);
    for (auto& [begin, ev] : events_) {
      cudaEventDestroy(ev.reduced);
      cudaEventDestroy(ev.on_host);
    }
    cudaEventDestroy(grads_on_host_);
    cudaEventDestroy(params_read_);
    cudaFreeHost(grads_host_);
    cudaFreeHost(params_host_);
  }

  const float* sum_gradients() override {
    // Each tower's backward pass is queued on its own stream; NCCL's kernels are queued on the
    // same streams, so the reduce starts on each GPU only after that GPU's backward, with no
    // host wait. The device-to-host copy follows the reduce on tower 0's stream; the host waits
    // on an event recorded right after it (not a device-wide sync: other towers may still be
    // finishing their part of the reduce, which does not concern the host), because MPI reads
    // grads_host_ next.
    reduce(0, n_);
    cuda::use_device(devices_[0]);
    DRT_CUDA_CHECK(
        cudaMemcpyAsync(grads_host_, towers_[0].grads, n_ * sizeof(float), cudaMemcpyDeviceToHost, streams_[0]));
    DRT_CUDA_CHECK(cudaEventRecord(grads_on_host_, streams_[0]));
    DRT_CUDA_CHECK(cudaEventSynchronize(grads_on_host_));
    return grads_host_;
  }

  // --overlap: the reduce of [b, e) on the towers' streams, right after that range's backward;
  // the copy to the host on the copy stream, which waits only for the reduce, so the copy engine
  // moves this layer's gradient while the SMs run the backward of the layers before it.
  void sum_gradients_to_host(std::size_t begin, std::size_t end) override {
    reduce(begin, end);
    cuda::use_device(devices_[0]);
    RangeEvents& ev = events_for(begin, end);
    DRT_CUDA_CHECK(cudaEventRecord(ev.reduced, streams_[0]));
    DRT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, ev.reduced, 0));
    DRT_CUDA_CHECK(cudaMemcpyAsync(grads_host_ + begin, towers_[0].grads + begin, (end - begin) * sizeof(float),
                                   cudaMemcpyDeviceToHost, copy_stream_));
    DRT_CUDA_CHECK(cudaEventRecord(ev.on_host, copy_stream_));
  }

  void await_gradients(std::size_t begin, std::size_t end) override {
    cuda::use_device(devices_[0]);  // this may be another thread than the one that queued the copies
    std::vector<cudaEvent_t> wait;
    {
      std::lock_guard<std::mutex> lock(events_mutex_);
      for (auto it = events_.lower_bound(begin); it != events_.end() && it->first < end; ++it)
        wait.push_back(it->second.on_host);
    }
    for (cudaEvent_t e : wait) DRT_CUDA_CHECK(cudaEventSynchronize(e));
  }

  const float* gradients_host() override { return grads_host_; }

  float* parameter_staging() override {
    // The previous load_parameters() copied from this buffer asynchronously; MPI may overwrite it
    // only once that copy has read it (in practice long done: a whole step of compute lies in
    // between, so this wait returns at once).
    cuda::use_device(devices_[0]);
    DRT_CUDA_CHECK(cudaEventSynchronize(params_read_));
    return params_host_;
  }

  void load_parameters(std::size_t begin, std::size_t end) override {
    // Host to tower 0 on tower 0's stream (the pull of the range has completed on the host: MPI
    // wrote it before this call), then the broadcast, also stream-ordered, so each tower's work
    // queued later sees the new parameters. The event marks when the host buffer has been read,
    // for parameter_staging(). (With --overlap the exchange thread pulls the next version into
    // the staging buffer only after the first gradient of the next backward is on the host,
    // which the copy stream reaches after everything queued on tower 0 before it, these copies
    // included.)
    cuda::use_device(devices_[0]);
    DRT_CUDA_CHECK(cudaMemcpyAsync(towers_[0].params + begin, params_host_ + begin, (end - begin) * sizeof(float),
                                   cudaMemcpyHostToDevice, streams_[0]));
    DRT_CUDA_CHECK(cudaEventRecord(params_read_, streams_[0]));
    if (towers_.size() > 1) {
      DRT_NCCL_CHECK(ncclGroupStart(), nullptr);
      for (std::size_t t = 0; t < towers_.size(); ++t)
        DRT_NCCL_CHECK(ncclBroadcast(towers_[0].params + begin, towers_[t].params + begin, end - begin, ncclFloat, 0,
                                     comms_[t], streams_[t]),
                       comms_[t]);
      DRT_NCCL_CHECK(ncclGroupEnd(), nullptr);
    }
  }

  std::size_t size() const override { return n_; }

  std::string describe() const override {
    std::string gpus;
    for (int d : devices_) gpus += str(gpus.empty() ? "" : ",", d);
    return str("GPUs [", gpus, "], ", towers_.size() > 1 ? "NCCL reduce + broadcast" : "one GPU",
               ", pinned host staging");
  }

 private:
  // Sums every tower's gradient over [b, e) into tower 0's (NCCL, in place), queued after each
  // tower's backward. One tower: nothing to do.
  void reduce(std::size_t begin, std::size_t end) {
    if (towers_.size() == 1) return;
    // The group call lets one thread drive all towers without deadlock.
    DRT_NCCL_CHECK(ncclGroupStart(), nullptr);
    for (std::size_t t = 0; t < towers_.size(); ++t)
      DRT_NCCL_CHECK(ncclReduce(towers_[t].grads + begin, towers_[t].grads + begin, end - begin, ncclFloat, ncclSum, 0,
                                comms_[t], streams_[t]),
                     comms_[t]);
    DRT_NCCL_CHECK(ncclGroupEnd(), nullptr);
  }

  // The events of the range starting at `begin` (the layers' ranges: the same every step, so
  // they are made once). Re-recording them for the next step is safe: the exchange has waited
  // for this step's before the next backward starts (ExchangePipeline::begin_step).
  struct RangeEvents {
    std::size_t end = 0;
    cudaEvent_t reduced = nullptr, on_host = nullptr;
  };
  RangeEvents& events_for(std::size_t begin, std::size_t end) {
    std::lock_guard<std::mutex> lock(events_mutex_);
    auto [it, fresh] = events_.try_emplace(begin);
    if (fresh) {
      it->second.end = end;
      DRT_CUDA_CHECK(cudaEventCreateWithFlags(&it->second.reduced, cudaEventDisableTiming));
      DRT_CUDA_CHECK(cudaEventCreateWithFlags(&it->second.on_host, cudaEventDisableTiming));
    }
    DRT_ASSERT(it->second.end == end, "gradient ranges must be the same every step");
    return it->second;
  }

  std::vector<TowerSlot> towers_;
  std::size_t n_;
  std::vector<int> devices_;
  std::vector<cudaStream_t> streams_;
  std::vector<ncclComm_t> comms_;
  float* grads_host_ = nullptr;
  float* params_host_ = nullptr;
  cudaEvent_t grads_on_host_ = nullptr;
  cudaEvent_t params_read_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // --overlap's device-to-host gradient copies
  std::mutex events_mutex_;             // the compute thread adds, the exchange thread reads
  std::map<std::size_t, RangeEvents> events_;
};

}  // namespace

std::unique_ptr<TowerGroup> make_nccl_tower_group(const std::vector<TowerSlot>& towers, std::size_t n) {
  return std::make_unique<NcclTowerGroup>(towers, n);
}

}  // namespace drt::backend
