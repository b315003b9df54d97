// The CUDA entry points of a build without CUDA: no GPU is ever usable, and asking for one is
// a configuration error that says how to get a CUDA build.
#include <cstdlib>

#include "drtrain/backend/cuda_backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::backend {
namespace {

const char* const kNoCuda =
    "this drtrain was built without CUDA (configure with -DDRT_ENABLE_CUDA=ON where nvcc is installed)";

}  // namespace

CudaDevices query_cuda_devices() {
  CudaDevices out;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  out.visible_env = visible ? str("'", visible, "'") : "(unset)";
  out.why_none = kNoCuda;
  return out;
}

std::string describe_cuda_device(int) { throw ConfigError(kNoCuda); }
std::string cuda_pci_bus_id(int) { throw ConfigError(kNoCuda); }
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions&) { throw ConfigError(kNoCuda); }
void* cuda_stream(Backend&) { throw ConfigError(kNoCuda); }
int cuda_device_of(Backend&) { throw ConfigError(kNoCuda); }
void set_cuda_debug_sync(bool) {}

}  // namespace drt::backend
