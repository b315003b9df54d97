// OneDnnConv (internal): 2-D convolution forward and backward through oneDNN's JIT kernels.
// drtrain's activations are NCHW and weights OIHW; oneDNN's fast kernels want blocked layouts
// (e.g. nChw16c), so each call reorders in and out of the layouts the primitive chose. One plan
// (primitives, reorders, blocked buffers) per shape, created on first use: JIT compilation costs
// milliseconds, a call of a cached plan none. Measured against im2col + OpenBLAS and PyTorch:
// bench/RESULTS.md.
#pragma once

#include <map>
#include <memory>
#include <tuple>

#include "drtrain/backend/backend.hpp"

namespace drt::backend {

class OneDnnConv {
 public:
  OneDnnConv();
  ~OneDnnConv();
  OneDnnConv(const OneDnnConv&) = delete;
  OneDnnConv& operator=(const OneDnnConv&) = delete;

  void forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
  // dw and dbias are overwritten; dx (when not null) too.
  void backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dw, float* dbias,
                float* dx);

 private:
  struct Plan;
  struct Engine;
  Plan& plan(const Conv2dShape& s);
  std::unique_ptr<Engine> engine_;
  std::map<std::tuple<int, int, int, int, int, int, int, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace drt::backend
