// Memory folding for SimGrid SMPI builds (include/drtrain/core/smpi_folding.hpp).
#include "drtrain/core/smpi_folding.hpp"

#include <smpi/smpi.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace drt::smpi {

bool folding() {
  static const bool on = [] {
    const char* v = std::getenv("DRT_SMPI_FOLD");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

void* fold_alloc(std::size_t bytes) {
  void* p = SMPI_SHARED_MALLOC(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void fold_free(void* p) { SMPI_SHARED_FREE(p); }

}  // namespace drt::smpi
