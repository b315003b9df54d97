#include "drtrain/backend/blas_kernels.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "drtrain/core/error.hpp"

extern "C" char* openblas_get_corename();

namespace drt::backend {

std::string blas_core_name() { return openblas_get_corename(); }

std::string better_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";
  const std::string current = blas_core_name();
  const bool generic = current == "Prescott" || current == "Core2" || current == "Nehalem" || current == "Penryn" ||
                       current == "Dunnington" || current == "Atom";
  if (!generic) return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

void ensure_blas_kernels(char** argv) {
  const char* allow = std::getenv("DRT_BLAS_REEXEC");
  if (allow && std::strcmp(allow, "0") == 0) return;
  const std::string core = better_blas_core();
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): first thing main does, no thread yet
  // The program's own path, not /proc/self/exe: the kernel names a process after the file it
  // executes, and a process named "exe" escapes pgrep/pkill/killall drtrain, top and job tools.
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0) {
    path[n] = '\0';
    execv(path, argv);  // returns only on failure (e.g. the file was replaced: "... (deleted)")
  }
  execv("/proc/self/exe", argv);
  const int err = errno;
  std::fprintf(stderr,
               "drtrain: warning: OpenBLAS chose %s kernels on a CPU that runs %s ones; re-executing with "
               "OPENBLAS_CORETYPE=%s failed (%s), so GEMMs run several times slower. Export "
               "OPENBLAS_CORETYPE=%s before starting drtrain.\n",
               blas_core_name().c_str(), core.c_str(), core.c_str(), errno_text(err).c_str(), core.c_str());
}

}  // namespace drt::backend
