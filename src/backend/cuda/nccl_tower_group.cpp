// The GPU tower group: the T GPUs of one worker process, one NCCL communicator each, all made
// in this process by ncclCommInitAll.
//
// Step protocol (tower 0 is the root):
//   sum_gradients:   ncclReduce(sum) of every tower's gradient into tower 0, then a copy of the
//                    sum to pinned host memory, which MPI pushes to the PS shards.
//   load_parameters: a copy of the pulled parameters from pinned host memory into tower 0, then
//                    ncclBroadcast from tower 0 to the others.
// Why a reduce and not an all-reduce with ncclAvg: only tower 0's result leaves the GPUs (the
// others are overwritten by the broadcast after the pull), so the reduce moves about half the
// bytes; and the 1/(towers x batch) factor is already folded into each tower's loss gradient
// (towers.hpp), where it costs nothing, so the sum is the average.
#include "nccl_tower_group.hpp"

#include <cuda_runtime.h>

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
  }

  ~NcclTowerGroup() override {
    for (std::size_t t = 0; t < towers_.size(); ++t) {
      cudaSetDevice(devices_[t]);
      cudaStreamSynchronize(streams_[t]);
    }
    for (ncclComm_t c : comms_) ncclCommDestroy(c);
    cudaSetDevice(devices_[0]);
    cudaEventDestroy(grads_on_host_);
    cudaEventDestroy(params_read_);
    cudaFreeHost(grads_host_);
    cudaFreeHost(params_host_);
  }

  const float* sum_gradients() override {
    // Each tower's backward pass is queued on its own stream; NCCL's kernels are queued on the
    // same streams, so the reduce starts on each GPU only after that GPU's backward, with no
    // host wait. The group call lets one thread drive all towers without deadlock.
    if (towers_.size() > 1) {
      DRT_NCCL_CHECK(ncclGroupStart(), nullptr);
      for (std::size_t t = 0; t < towers_.size(); ++t)
        DRT_NCCL_CHECK(
            ncclReduce(towers_[t].grads, towers_[t].grads, n_, ncclFloat, ncclSum, 0, comms_[t], streams_[t]),
            comms_[t]);
      DRT_NCCL_CHECK(ncclGroupEnd(), nullptr);
    }
    // The device-to-host copy follows the reduce on tower 0's stream; the host waits on an event
    // recorded right after it (not a device-wide sync: other towers may still be finishing their
    // part of the reduce, which does not concern the host), because MPI reads grads_host_ next.
    cuda::use_device(devices_[0]);
    DRT_CUDA_CHECK(
        cudaMemcpyAsync(grads_host_, towers_[0].grads, n_ * sizeof(float), cudaMemcpyDeviceToHost, streams_[0]));
    DRT_CUDA_CHECK(cudaEventRecord(grads_on_host_, streams_[0]));
    DRT_CUDA_CHECK(cudaEventSynchronize(grads_on_host_));
    return grads_host_;
  }

  float* parameter_staging() override {
    // The previous load_parameters() copied from this buffer asynchronously; MPI may overwrite it
    // only once that copy has read it (in practice long done: a whole step of compute lies in
    // between, so this wait returns at once).
    cuda::use_device(devices_[0]);
    DRT_CUDA_CHECK(cudaEventSynchronize(params_read_));
    return params_host_;
  }

  void load_parameters() override {
    // Host to tower 0 on tower 0's stream (the pull has completed on the host: MPI wrote the
    // buffer before this call), then the broadcast, also stream-ordered, so each tower's next
    // forward pass (queued later on its stream) sees the new parameters. The event marks when
    // the host buffer has been read, for parameter_staging().
    cuda::use_device(devices_[0]);
    DRT_CUDA_CHECK(
        cudaMemcpyAsync(towers_[0].params, params_host_, n_ * sizeof(float), cudaMemcpyHostToDevice, streams_[0]));
    DRT_CUDA_CHECK(cudaEventRecord(params_read_, streams_[0]));
    if (towers_.size() > 1) {
      DRT_NCCL_CHECK(ncclGroupStart(), nullptr);
      for (std::size_t t = 0; t < towers_.size(); ++t)
        DRT_NCCL_CHECK(ncclBroadcast(towers_[0].params, towers_[t].params, n_, ncclFloat, 0, comms_[t], streams_[t]),
                       comms_[t]);
      DRT_NCCL_CHECK(ncclGroupEnd(), nullptr);
    }
  }

  std::string describe() const override {
    std::string gpus;
    for (int d : devices_) gpus += str(gpus.empty() ? "" : ",", d);
    return str("GPUs [", gpus, "], ", towers_.size() > 1 ? "NCCL reduce + broadcast" : "one GPU",
               ", pinned host staging");
  }

 private:
  std::vector<TowerSlot> towers_;
  std::size_t n_;
  std::vector<int> devices_;
  std::vector<cudaStream_t> streams_;
  std::vector<ncclComm_t> comms_;
  float* grads_host_ = nullptr;
  float* params_host_ = nullptr;
  cudaEvent_t grads_on_host_ = nullptr;
  cudaEvent_t params_read_ = nullptr;
};

}  // namespace

std::unique_ptr<TowerGroup> make_nccl_tower_group(const std::vector<TowerSlot>& towers, std::size_t n) {
  return std::make_unique<NcclTowerGroup>(towers, n);
}

}  // namespace drt::backend
