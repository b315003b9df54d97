#include "drtrain/nn/network.hpp"

#include <algorithm>

#include "drtrain/core/error.hpp"

namespace drt::nn {

Network::Network(const ModelSpec& spec, backend::Backend& device, int max_batch)
    : spec_(spec), device_(device), max_batch_(max_batch), layers_(spec.make_layers()) {
  TensorShape shape = spec.input();
  shape.n = max_batch;
  std::size_t largest = shape.size();
  acts_.push_back(nullptr);  // the input: the caller's buffer
  const Layer* previous = nullptr;
  for (auto& layer : layers_) {
    shapes_.push_back(shape);
    layer->prepare(device, shape);
    shape = layer->output_shape(shape);
    largest = std::max(largest, shape.size());
    const bool may_share = acts_.back() && !(previous && previous->keeps_output());
    previous = layer.get();
    if (layer->in_place() && may_share) {
      acts_.push_back(acts_.back());
    } else {
      storage_.push_back(device.allocate_floats(shape.size()));
      acts_.push_back(storage_.back().floats());
    }
  }
  shapes_.push_back(shape);
  grad_a_ = device.allocate_floats(largest);
  grad_b_ = device.allocate_floats(largest);
}

void Network::bind(const float* params, float* grads) {
  grads_ = grads;
  ranges_.clear();
  std::size_t offset = 0;
  for (auto& layer : layers_) {
    layer->bind(params + offset, grads + offset);
    const std::size_t begin = offset;
    for (const ParamSpec& p : layer->params()) {
      std::size_t count = 1;
      for (auto d : p.shape) count *= static_cast<std::size_t>(d);
      offset += count;
    }
    ranges_.emplace_back(begin, offset);
  }
}

void Network::forward(const float* x, int n) {
  DRT_ASSERT(n >= 1 && n <= max_batch_, "batch larger than the network was prepared for");
  // The first layer reads the caller's buffer (never writes it: the constructor gives an in-place
  // first layer a buffer of its own).
  acts_[0] = const_cast<float*>(x);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    TensorShape in = shapes_[i];
    in.n = n;
    float* y = acts_[i + 1];
    if (layers_[i]->in_place() && acts_[i + 1] == acts_[i]) y = acts_[i];
    if (hooks_.before_forward && ranges_[i].second > ranges_[i].first)
      hooks_.before_forward(ranges_[i].first, ranges_[i].second);
    layers_[i]->forward(device_, in, acts_[i], y);
  }
}

void Network::enqueue_train(const float* x, const std::int32_t* labels, int n, float grad_scale) {
  if (n == 0) {
    device_.zero(grads_, spec_.layout().total() * sizeof(float));
    for (int slot = 0; slot < 3; ++slot) device_.mark(slot);
    if (hooks_.grads_ready)  // zero gradients are final too
      for (std::size_t i = ranges_.size(); i-- > 0;)
        if (ranges_[i].second > ranges_[i].first) hooks_.grads_ready(ranges_[i].first, ranges_[i].second);
    return;
  }
  device_.mark(0);
  forward(x, n);
  float* dy = grad_a_.floats();
  float* dx = grad_b_.floats();
  device_.accumulate_softmax_cross_entropy(acts_.back(), labels, n, spec_.classes(), dy, grad_scale, 0.0f);
  device_.mark(1);
  for (std::size_t i = layers_.size(); i-- > 0;) {
    TensorShape in = shapes_[i];
    in.n = n;
    float* target = i == 0 ? nullptr : (layers_[i]->in_place() ? dy : dx);
    layers_[i]->backward(device_, in, acts_[i], acts_[i + 1], dy, target);
    if (hooks_.grads_ready && ranges_[i].second > ranges_[i].first)
      hooks_.grads_ready(ranges_[i].first, ranges_[i].second);
    if (target && target != dy) std::swap(dy, dx);
  }
  device_.mark(2);
}

backend::LossSums Network::train(const float* x, const std::int32_t* labels, int n, float grad_scale) {
  enqueue_train(x, labels, n, grad_scale);
  return take_loss_sums();
}

void Network::enqueue_evaluate(const float* x, const std::int32_t* labels, int n) {
  if (n == 0) return;
  forward(x, n);
  device_.accumulate_softmax_cross_entropy(acts_.back(), labels, n, spec_.classes(), nullptr, 0.0f, 0.0f);
}

backend::LossSums Network::evaluate(const float* x, const std::int32_t* labels, int n) {
  enqueue_evaluate(x, labels, n);
  return take_loss_sums();
}

backend::LossSums Network::take_loss_sums() { return device_.take_loss_sums(); }

double Network::last_forward_s() { return device_.seconds_between(0, 1); }
double Network::last_backward_s() { return device_.seconds_between(1, 2); }

}  // namespace drt::nn
