// ParamLayout: the flat parameter space. Every trainable tensor of a model lives at a fixed
// offset in one contiguous float32 buffer, in the order the tensors were added (a model adds
// them layer by layer, weight before bias); gradients use the same layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace drt {

struct TensorSpec {
  std::string name;                 // unique, e.g. "fc1.weight"
  std::vector<std::int64_t> shape;  // row-major
  std::size_t offset = 0;           // first element in the flat buffer
  std::size_t numel = 0;

  std::string shape_string() const;  // "512x784"
};

class ParamLayout {
 public:
  // Appends a tensor at the end of the flat space. Throws on a duplicate name or a bad shape.
  const TensorSpec& add(const std::string& name, const std::vector<std::int64_t>& shape);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  std::size_t total() const { return total_; }  // elements
  std::size_t bytes() const { return total_ * sizeof(float); }
  const TensorSpec* find(const std::string& name) const;

  // Names, shapes and offsets as text; identical layouts give identical text.
  std::string to_text() const;

 private:
  std::vector<TensorSpec> tensors_;
  std::size_t total_ = 0;
};

}  // namespace drt
