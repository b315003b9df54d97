// The CPU backend's GEMM (internal): row-major C = alpha op(A) op(B) + beta C with leading
// dimensions, through oneDNN's sgemm (when `onednn`; a build with oneDNN only) or OpenBLAS's
// cblas_sgemm. Backend::gemm is the dense case; the attention tiles (cpu_attention.cpp) read
// strided views of the fused q, k, v rows.
#pragma once

namespace drt::backend::cpu {

void sgemm(bool onednn, bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc);

// True when sgemm may be called from several threads at once and then runs on the calling
// thread only: oneDNN's sgemm inside an OpenMP parallel region does; the pthread OpenBLAS
// Debian ships would start its own threads from each caller.
bool sgemm_nests(bool onednn);

}  // namespace drt::backend::cpu
