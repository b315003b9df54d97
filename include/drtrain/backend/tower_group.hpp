// TowerGroup: the collective operations among one worker's towers (model replicas on its
// devices), and the host buffers the parameter-server exchange pushes from and pulls into.
// Tower 0 is the root. On the CPU the towers share host memory and this is a few loops; on GPUs
// it is NCCL (reduce, broadcast) plus copies through pinned host memory ordered by CUDA events.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "drtrain/backend/backend.hpp"

namespace drt::backend {

// One tower's device and its flat parameter and gradient buffers (n floats each).
struct TowerSlot {
  Backend* device = nullptr;
  float* params = nullptr;
  float* grads = nullptr;
};

class TowerGroup {
 public:
  virtual ~TowerGroup() = default;
  // Sums the towers' gradients (after their queued backward passes) and returns host memory
  // holding the sum, valid until the next call. The towers' gradient buffers are undefined after.
  virtual const float* sum_gradients() = 0;
  // Host memory for the new parameters; writable when this returns (a previous
  // load_parameters() may still be reading it until then).
  virtual float* parameter_staging() = 0;
  // Gives every tower the parameters in parameter_staging(); work queued on a tower after this
  // sees them.
  void load_parameters() { load_parameters(0, size()); }

  // Layer by layer (--overlap), instead of the whole-buffer calls above:
  //   sum_gradients_to_host(b, e): queues the sum of the towers' gradients over [b, e) into
  //     gradients_host(), after the work queued so far on every tower (that range's backward);
  //     ranges of one step never overlap. On the CPU it is done when it returns; on GPUs the
  //     reduce runs on the towers' streams and the copy on a copy stream, while the backward of
  //     the layers before it goes on.
  //   await_gradients(b, e): blocks until every range queued inside [b, e) is in gradients_host().
  //     Any thread may call it (the exchange thread does, before it pushes the range).
  //   load_parameters(b, e): gives every tower parameters [b, e) of parameter_staging(); work
  //     queued later sees them.
  virtual void sum_gradients_to_host(std::size_t begin, std::size_t end) = 0;
  virtual void await_gradients(std::size_t begin, std::size_t end) = 0;
  virtual const float* gradients_host() = 0;
  virtual void load_parameters(std::size_t begin, std::size_t end) = 0;
  virtual std::size_t size() const = 0;  // floats in each buffer
  virtual std::string describe() const = 0;
};

// All slots on CPU backends: loops over host memory. All on CUDA backends (distinct GPUs): NCCL.
std::unique_ptr<TowerGroup> make_tower_group(const std::vector<TowerSlot>& towers, std::size_t n);

}  // namespace drt::backend
