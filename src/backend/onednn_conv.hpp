// OneDnnConv (internal): 2-D convolution forward and backward through oneDNN's JIT kernels.
// drtrain's activations are NCHW and weights OIHW; oneDNN's fast kernels want blocked layouts
// (e.g. nChw16c), so each call reorders in and out of the layouts the primitive chose. One plan
// (primitives, reorders, blocked buffers) per shape and bias presence, created on first use: JIT
// compilation costs milliseconds, a call of a cached plan none. Grouped convolutions use oneDNN's
// grouped weights (goihw, the same memory as drtrain's [out x in/groups x k x k]). Measured
// against im2col + OpenBLAS and PyTorch: bench/RESULTS.md.
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

  // No bias when bias is null.
  void forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
  // dw is overwritten; dbias and dx (each when not null) too.
  void backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dw, float* dbias,
                float* dx);

 private:
  struct Plan;
  struct Engine;
  Plan& plan(const Conv2dShape& s, bool bias);
  std::unique_ptr<Engine> engine_;
  // batch, in_channels, height, width, out_channels, kernel, stride, pad, groups, bias
  using Key = std::tuple<int, int, int, int, int, int, int, int, int, bool>;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace drt::backend
