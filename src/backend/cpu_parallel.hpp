// parallel_for for the CPU backend's own loops (batch norm, elementwise, pooling): splits an index
// range over the OpenMP threads that oneDNN also uses (their number is --threads, set with the
// BLAS threads), or runs it in order on the calling thread when the build has no OpenMP, when
// there is one thread, or when the work is too small to pay for waking the others. Each index
// runs on exactly one thread, so a loop whose iterations are independent gives bitwise the same
// result on any number of threads.
#pragma once

#include <algorithm>
#include <cstddef>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace drt::backend::cpu {

// Below this many elements of work a loop runs on one thread (waking a second costs a few
// microseconds; an elementwise pass over 32 Ki floats takes about as long).
constexpr std::size_t kMinParallelElements = std::size_t{1} << 15;

template <typename Fn>
void parallel_for(std::size_t count, std::size_t elements, Fn&& fn) {
#ifdef _OPENMP
  if (count > 1 && elements >= kMinParallelElements && omp_get_max_threads() > 1 && !omp_in_parallel()) {
    const auto n = static_cast<std::ptrdiff_t>(count);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < n; ++i) fn(static_cast<std::size_t>(i));
    return;
  }
#else
  (void)elements;
#endif
  for (std::size_t i = 0; i < count; ++i) fn(i);
}

// Runs fn(begin, end) over [0, n) in contiguous pieces of at least kMinParallelElements, one
// piece per thread at most.
template <typename Fn>
void parallel_ranges(std::size_t n, Fn&& fn) {
  std::size_t pieces = 1;
#ifdef _OPENMP
  if (n >= 2 * kMinParallelElements && !omp_in_parallel()) {
    const auto threads = static_cast<std::size_t>(omp_get_max_threads());
    pieces = std::min(threads, n / kMinParallelElements);
  }
#endif
  const std::size_t per = ((n + pieces - 1) / pieces + 15) / 16 * 16;  // whole vectors
  parallel_for(pieces, n, [&](std::size_t p) {
    const std::size_t begin = p * per, end = begin + per < n ? begin + per : n;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace drt::backend::cpu
