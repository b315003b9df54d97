// im2col / col2im for the CPU convolution (internal). The column matrix of a group of images has
// in_channels * kernel * kernel rows and `columns` columns; image i of the group fills columns
// [first_column, first_column + out_height * out_width).
#pragma once

#include "drtrain/backend/backend.hpp"

namespace drt::backend {

// col[(c, ki, kj), first_column + (r, q)] = x[c, r*stride - pad + ki, q*stride - pad + kj] (0 outside).
void im2col(const Conv2dShape& s, const float* x, float* col, int columns, int first_column);
// The adjoint: dx[c, ...] += col[(c, ki, kj), first_column + (r, q)].
void col2im_add(const Conv2dShape& s, const float* col, int columns, int first_column, float* dx);

}  // namespace drt::backend
