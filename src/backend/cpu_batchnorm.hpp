// Batch normalisation for the CPU backend (internal): the three Backend calls (backend.hpp) in
// loops built for the CPU's vector width (DRT_SIMD_CLONES) and split over the threads; per-channel
// sums in float runs added up in double (cpu_batchnorm.cpp).
#pragma once

#include "drtrain/backend/backend.hpp"

namespace drt::backend::cpu {

void batchnorm_forward_train(const BatchNormShape& s, const float* x, const float* gamma, const float* beta, float eps,
                             float* y, float* save_mean, float* save_inv_std, float momentum, const float* running_mean,
                             const float* running_var, float* new_mean, float* new_var);
void batchnorm_forward_infer(const BatchNormShape& s, const float* x, const float* gamma, const float* beta,
                             const float* running_mean, const float* running_var, float eps, float* y);
void batchnorm_backward(const BatchNormShape& s, const float* x, const float* dy, const float* gamma,
                        const float* save_mean, const float* save_inv_std, float* dx, float* dgamma, float* dbeta);

}  // namespace drt::backend::cpu
