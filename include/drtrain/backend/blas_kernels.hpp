// OpenBLAS kernel selection. Debian's OpenBLAS is a DYNAMIC_ARCH build that picks its kernels
// from the CPU model when the library loads. On CPUs it does not recognise (seen here: a VM that
// reports "Intel(R) Xeon(R) Processor" with AVX-512) it falls back to "Prescott" (SSE3) kernels,
// 4-5x slower than the AVX-512 ones (bench/RESULTS.md). The choice can only be changed before
// the library loads, through OPENBLAS_CORETYPE.
#pragma once

#include <string>

namespace drt::backend {

// The kernel family OpenBLAS chose, e.g. "SkylakeX", "Haswell", "Prescott".
std::string blas_core_name();

// The OPENBLAS_CORETYPE this CPU should use when OpenBLAS fell back to a generic core, or ""
// when its own choice is fine (or OPENBLAS_CORETYPE is already set).
std::string better_blas_core();

// Call first thing in main(), before MPI_Init. When better_blas_core() is not empty, sets
// OPENBLAS_CORETYPE and re-executes the program (same PID, arguments and environment, so MPI
// launchers are unaffected); DRT_BLAS_REEXEC=0 disables this. Returns only if nothing needed
// doing or the re-exec failed (then the program runs on, slower, and says so).
void ensure_blas_kernels(char** argv);

}  // namespace drt::backend
