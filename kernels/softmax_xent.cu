// CUDA kernels of softmax_cross_entropy (launchers.hpp): the loss of a batch of logits against
// int32 labels with optional label smoothing, its number of correct predictions and of bad
// labels, added to three device doubles, and optionally d(loss)/d(logits). Two kernels on the
// stream:
//
//   1. rows: one thread per row runs rules.hpp softmax_xent_row (the formula of the CPU
//      reference) and writes the row's loss to row_scratch[r]. A label outside [0, classes)
//      is never used as an index: the row's loss is NaN and its dlogits row NaN (the backend
//      throws for such a batch anyway). The counts of correct predictions and of bad labels are
//      integers: each block counts its rows (__syncthreads_count) and adds its counts to
//      sums[1] and sums[2] with one atomicAdd each. Integer-valued doubles add exactly, so
//      these sums do not depend on the order of the atomics (exact below 2^53).
//   2. sum: one block adds row_scratch in a fixed order (thread t sums rows t, t + 256, ...,
//      then a shared-memory tree) and adds the total to sums[0]. The order depends only on
//      `rows`, so the loss is the same on every run (it may differ in the last bits from the
//      CPU reference, which adds the rows one after another).
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include "drtrain/kernels/launchers.hpp"
#include "cuda_check.hpp"

namespace drt::kernels {
namespace {

constexpr unsigned kRowBlock = 128;
constexpr unsigned kSumBlock = 256;  // a power of two (tree reduction)

__global__ void xent_rows_kernel(const float* logits, const std::int32_t* labels, int rows, int classes, float* dlogits,
                                 float grad_scale, float smoothing, double* row_loss, double* sums) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  // The loop runs on block boundaries so that every thread of a block takes the same number of
  // turns and reaches __syncthreads_count together; threads past the last row count nothing.
  for (long long base = static_cast<long long>(blockIdx.x) * blockDim.x; base < rows; base += stride) {
    const long long r = base + threadIdx.x;
    bool correct = false, bad = false;
    if (r < rows) {
      const int label = labels[r];
      const std::size_t at = static_cast<std::size_t>(r) * static_cast<std::size_t>(classes);
      float* d = dlogits ? dlogits + at : nullptr;
      if (label < 0 || label >= classes) {
        bad = true;
        row_loss[r] = CUDART_NAN;
        if (d)
          for (int j = 0; j < classes; ++j) d[j] = CUDART_NAN_F;
      } else {
        row_loss[r] = softmax_xent_row(logits + at, label, classes, d, grad_scale, &correct, smoothing);
      }
    }
    const int block_correct = __syncthreads_count(correct);
    const int block_bad = __syncthreads_count(bad);
    if (threadIdx.x == 0) {
      if (block_correct > 0) atomicAdd(&sums[1], static_cast<double>(block_correct));
      if (block_bad > 0) atomicAdd(&sums[2], static_cast<double>(block_bad));
    }
  }
}

// One block of kSumBlock threads: sums[0] += row_loss[0] + ... + row_loss[rows - 1].
__global__ void xent_sum_kernel(const double* row_loss, int rows, double* sums) {
  __shared__ double partial[kSumBlock];
  double sum = 0.0;
  for (int r = static_cast<int>(threadIdx.x); r < rows; r += kSumBlock) sum += row_loss[r];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = kSumBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[0] += partial[0];
}

}  // namespace

void softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes, float* dlogits,
                           float grad_scale, float label_smoothing, double* row_scratch, double* sums, Stream stream) {
  if (rows <= 0) return;
  if (classes < 0) classes = 0;  // every label is then out of range
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  xent_rows_kernel<<<cuda::grid_for(static_cast<std::size_t>(rows), kRowBlock), kRowBlock, 0, s>>>(
      logits, labels, rows, classes, dlogits, grad_scale, label_smoothing, row_scratch, sums);
  DRT_CUDA_LAUNCH_CHECK("softmax_cross_entropy rows");
  xent_sum_kernel<<<1, kSumBlock, 0, s>>>(row_scratch, rows, sums);
  DRT_CUDA_LAUNCH_CHECK("softmax_cross_entropy sum");
}

}  // namespace drt::kernels
