// Pooling for the CPU backend (internal): max, average and global average pooling of NCHW
// planes, as Backend specifies them (backend.hpp), in plain loops.
#pragma once

#include <cstddef>
#include <cstdint>

#include "drtrain/backend/backend.hpp"

namespace drt::backend::cpu {

// argmax[o] = index in x (over the whole batch) of output o's first maximum in row-major order.
void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax);
void maxpool2d_backward(const Pool2dShape& s, const float* dy, const std::int32_t* argmax, float* dx);
void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y);
void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx);
void global_avgpool_forward(const float* x, float* y, std::size_t planes, std::size_t plane_size);
void global_avgpool_backward(const float* dy, float* dx, std::size_t planes, std::size_t plane_size);

}  // namespace drt::backend::cpu
