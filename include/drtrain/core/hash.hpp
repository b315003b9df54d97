// splitmix64 (Steele, Lea and Flood 2014): one step of the generator, a bijective 64-bit mix used
// to derive seeds and counter-based draws (epoch permutations, augmentation, checkpoint checksum
// terms) that are the same on every machine. Device code has its finaliser as kernels::mix64.
#pragma once

#include <cstdint>

namespace drt {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace drt
