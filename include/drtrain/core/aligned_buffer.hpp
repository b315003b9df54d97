// AlignedBuffer<T>: an owned, 64-byte-aligned, zero-initialised array of trivially copyable T.
// Owns its memory; move-only. (In SimGrid SMPI builds it may be folded: core/smpi_folding.hpp.)
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#if DRT_SMPI
#include "drtrain/core/smpi_folding.hpp"
#endif

namespace drt {

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "AlignedBuffer holds plain values only");

 public:
  static constexpr std::size_t kAlignment = 64;  // one cache line; enough for AVX-512 loads

  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t size) : size_(size) {
    if (size == 0) return;
    data_ = allocate(size);
    std::memset(static_cast<void*>(data_), 0, bytes_for(size));
  }
  ~AlignedBuffer() { release(data_, size_); }

  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      release(data_, size_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  static std::size_t bytes_for(std::size_t size) {
    return (size * sizeof(T) + kAlignment - 1) / kAlignment * kAlignment;
  }
  static T* allocate(std::size_t size) {
#if DRT_SMPI
    if (smpi::folds(bytes_for(size))) return static_cast<T*>(smpi::fold_alloc(bytes_for(size)));
#endif
    T* p = static_cast<T*>(std::aligned_alloc(kAlignment, bytes_for(size)));
    if (!p) throw std::bad_alloc();
    return p;
  }
  static void release(T* p, [[maybe_unused]] std::size_t size) {
#if DRT_SMPI
    if (p != nullptr && smpi::folds(bytes_for(size))) {
      smpi::fold_free(p);
      return;
    }
#endif
    std::free(p);
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace drt
