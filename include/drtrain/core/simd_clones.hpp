// DRT_SIMD_CLONES: builds a hot loop for three x86-64 levels (AVX-512, AVX2, baseline SSE2) and
// picks one when the program loads (GCC's target_clones, resolved once through an ifunc), so a
// portable binary still runs its elementwise loops on the CPU's widest vector units. Targets that
// use it compile with -ffp-contract=off (cmake: drt_simd_flags), so the AVX2 and AVX-512 clones do
// not fuse multiply-adds the baseline clone cannot: every clone computes bitwise the same result,
// and a run's numbers do not depend on which CPU a worker or PS landed on.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DRT_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DRT_SIMD_CLONES
#endif
