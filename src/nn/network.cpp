#include "drtrain/nn/network.hpp"

#include <algorithm>

#include "drtrain/core/error.hpp"

namespace drt::nn {

Network::Network(const ModelSpec& spec, backend::Backend& device, int max_batch)
    : spec_(spec), device_(device), max_batch_(max_batch), layers_(spec.make_layers()) {
  DRT_ASSERT(max_batch >= 1, "a network needs room for at least one sample");
  const auto& wiring = spec.wiring();
  consumers_.assign(layers_.size(), 0);
  largest_ = spec.input().per_sample();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    for (int p : wiring[i].inputs)
      if (p >= 0) ++consumers_[static_cast<std::size_t>(p)];
    largest_ = std::max(largest_, wiring[i].output.per_sample());
    layers_[i]->prepare(device, input_shapes(i, max_batch), static_cast<int>(i));
  }
  largest_ *= static_cast<std::size_t>(max_batch);
  plan_buffers();
}

std::vector<TensorShape> Network::input_shapes(std::size_t node, int n) const {
  std::vector<TensorShape> in;
  for (int p : spec_.wiring()[node].inputs) {
    TensorShape s = p < 0 ? spec_.input() : spec_.wiring()[static_cast<std::size_t>(p)].output;
    s.n = n;
    in.push_back(s);
  }
  return in;
}

// Activations: a node's output gets a buffer of its own, except that a view (flatten) shares its
// input's, and an in-place layer (ReLU, dropout, ...) takes over its input's buffer when nothing
// else reads that input: one consumer, a producer whose backward does not read its output, and
// not the caller's data. Gradients: a pool of buffers, planned by walking backward once; a
// buffer is free again once its node's backward has read it. An in-place, view or add node hands
// its own output gradient's buffer to one input of a single consumer, which saves a copy (add)
// or lets backward write dx over dy.
void Network::plan_buffers() {
  plan_activations();
  plan_gradients();
}

void Network::plan_activations() {
  const auto& wiring = spec_.wiring();
  const std::size_t nodes = layers_.size();
  // May node p's output buffer be overwritten by its (single) consumer?
  const auto overwritable = [&](int p) {
    while (p >= 0) {
      const Layer& producer = *layers_[static_cast<std::size_t>(p)];
      if (consumers_[static_cast<std::size_t>(p)] != 1 || producer.keeps_output()) return false;
      if (!producer.is_view()) return true;
      p = wiring[static_cast<std::size_t>(p)].inputs[0];  // a view: its input shares the buffer
    }
    return false;  // the caller's data
  };
  act_owner_.assign(nodes, kData);
  act_.resize(nodes);
  for (std::size_t i = 0; i < nodes; ++i) {
    const Layer& layer = *layers_[i];
    const int in = wiring[i].inputs[0];
    if (layer.is_view()) {
      act_owner_[i] = in < 0 ? kData : act_owner_[static_cast<std::size_t>(in)];
    } else if (layer.in_place() && wiring[i].inputs.size() == 1 && overwritable(in)) {
      act_owner_[i] = act_owner_[static_cast<std::size_t>(in)];
    } else {
      act_owner_[i] = static_cast<int>(i);
      TensorShape out = wiring[i].output;
      out.n = max_batch_;
      act_[i] = device_.allocate_floats(out.size());
    }
  }
}

void Network::plan_gradients() {
  const auto& wiring = spec_.wiring();
  const std::size_t nodes = layers_.size();
  std::vector<int> free_buffers;
  int buffers = 0, scratch = 0;
  const auto take = [&] {
    if (free_buffers.empty()) return buffers++;
    const int b = free_buffers.back();
    free_buffers.pop_back();
    return b;
  };
  dy_buffer_.assign(nodes, -1);
  dx_.assign(nodes, {});
  dy_buffer_[nodes - 1] = take();  // the logits' gradient
  for (std::size_t i = nodes; i-- > 0;) {
    const int dy = dy_buffer_[i];
    DRT_ASSERT(dy >= 0, "a node's output gradient has no buffer (unused output)");
    const Layer& layer = *layers_[i];
    bool aliased = false;
    int adds = 0;
    std::vector<int> assigned_here;
    for (int p : wiring[i].inputs) {
      GradTarget t;
      if (p >= 0) {
        const auto pi = static_cast<std::size_t>(p);
        const bool fresh =
            dy_buffer_[pi] < 0 && std::find(assigned_here.begin(), assigned_here.end(), p) == assigned_here.end();
        if (fresh) {
          // At most one input takes dy's buffer over: two would share one gradient buffer.
          const bool over_dy =
              !aliased && (layer.in_place() || layer.is_view() || layer.passes_gradient()) && consumers_[pi] == 1;
          dy_buffer_[pi] = over_dy ? dy : take();
          aliased = aliased || over_dy;
          assigned_here.push_back(p);
          t.buffer = dy_buffer_[pi];
        } else {
          t.buffer = dy_buffer_[pi];
          t.add = true;
          ++adds;
        }
      }
      dx_[i].push_back(t);
    }
    scratch = std::max(scratch, adds);
    if (!aliased) free_buffers.push_back(dy);
  }
  for (int b = 0; b < buffers; ++b) grad_.push_back(device_.allocate_floats(largest_));
  if (scratch > 0) scratch_ = device_.allocate_floats(largest_ * static_cast<std::size_t>(scratch));
}

std::size_t Network::activation_bytes() const {
  std::size_t bytes = scratch_.bytes();
  for (const auto& b : act_) bytes += b.bytes();
  for (const auto& b : grad_) bytes += b.bytes();
  return bytes;
}

const float* Network::activation(int node, const float* x) const {
  const int owner = node < 0 ? kData : act_owner_[static_cast<std::size_t>(node)];
  return owner == kData ? x : act_[static_cast<std::size_t>(owner)].floats();
}

void Network::bind(const float* params, float* grads) {
  grads_ = grads;
  ranges_.clear();
  std::size_t offset = 0;
  for (auto& layer : layers_) {
    layer->bind(params + offset, grads ? grads + offset : nullptr);
    const std::size_t begin = offset;
    for (const ParamSpec& p : layer->params()) offset += p.numel();
    ranges_.emplace_back(begin, offset);
  }
  // Tied weights: the head reads its owner's table (the owner's first tensor) and writes its
  // gradient first (it lies below the owner, so its backward runs first); the owner adds.
  const auto& wiring = spec_.wiring();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const int owner = wiring[i].tied;
    if (owner < 0) continue;
    const std::size_t at = ranges_[static_cast<std::size_t>(owner)].first;
    layers_[i]->bind_shared(params + at, grads ? grads + at : nullptr);
    layers_[static_cast<std::size_t>(owner)]->set_tied_owner(true);
  }
}

// The loss's rows: samples, or every position of a sequence (GPT_DESIGN.md: per-token loss,
// the mean over the tokens of the global batch, so the gradient scale is divided by T).
int Network::loss_rows(int n) const { return n * spec_.wiring().back().output.positions(); }
float Network::loss_scale(float grad_scale) const {
  return grad_scale / static_cast<float>(spec_.wiring().back().output.positions());
}

void Network::forward(const float* x, int n, const Pass& pass) {
  DRT_ASSERT(n >= 1 && n <= max_batch_, "batch larger than the network was prepared for");
  const auto& wiring = spec_.wiring();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::vector<const float*> in;
    for (int p : wiring[i].inputs) in.push_back(activation(p, x));
    // The first layer never writes the caller's buffer: an in-place layer there has its own.
    float* y = const_cast<float*>(activation(static_cast<int>(i), x));
    if (hooks_.before_forward && ranges_[i].second > ranges_[i].first)
      hooks_.before_forward(ranges_[i].first, ranges_[i].second);
    layers_[i]->forward(device_, pass, input_shapes(i, n), in, y);
  }
}

void Network::enqueue_train(const float* x, const std::int32_t* labels, int n, float grad_scale, const Pass& pass_in) {
  if (n == 0) {
    device_.zero(grads_, spec_.layout().total() * sizeof(float));
    for (int slot = 0; slot < 3; ++slot) device_.mark(slot);
    if (hooks_.grads_ready)  // zero gradients are final too
      for (std::size_t i = ranges_.size(); i-- > 0;)
        if (ranges_[i].second > ranges_[i].first) hooks_.grads_ready(ranges_[i].first, ranges_[i].second);
    return;
  }
  Pass pass = pass_in;
  pass.training = true;
  device_.mark(0);
  forward(x, n, pass);
  const std::size_t last = layers_.size() - 1;
  device_.accumulate_softmax_cross_entropy(activation(static_cast<int>(last), x), labels, loss_rows(n), spec_.classes(),
                                           grad_[static_cast<std::size_t>(dy_buffer_[last])].floats(),
                                           loss_scale(grad_scale), spec_.label_smoothing());
  device_.mark(1);
  const auto& wiring = spec_.wiring();
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const std::vector<TensorShape> in = input_shapes(i, n);
    std::vector<const float*> xs;
    for (int p : wiring[i].inputs) xs.push_back(activation(p, x));
    std::vector<float*> dx;
    std::size_t scratch = 0;
    for (const GradTarget& t : dx_[i]) {
      if (t.buffer < 0) dx.push_back(nullptr);
      else if (t.add) dx.push_back(scratch_.floats() + largest_ * scratch++);
      else dx.push_back(grad_[static_cast<std::size_t>(t.buffer)].floats());
    }
    layers_[i]->backward(device_, pass, in, xs, activation(static_cast<int>(i), x),
                         grad_[static_cast<std::size_t>(dy_buffer_[i])].floats(), dx);
    for (std::size_t k = 0; k < dx.size(); ++k)
      if (dx_[i][k].add)
        device_.axpby(1.0f, dx[k], 1.0f, grad_[static_cast<std::size_t>(dx_[i][k].buffer)].floats(), in[k].size());
    if (hooks_.grads_ready && ranges_[i].second > ranges_[i].first)
      hooks_.grads_ready(ranges_[i].first, ranges_[i].second);
  }
  device_.mark(2);
}

backend::LossSums Network::train(const float* x, const std::int32_t* labels, int n, float grad_scale,
                                 const Pass& pass) {
  enqueue_train(x, labels, n, grad_scale, pass);
  return take_loss_sums();
}

void Network::enqueue_evaluate(const float* x, const std::int32_t* labels, int n) {
  if (n == 0) return;
  Pass pass;
  pass.training = false;
  forward(x, n, pass);
  device_.accumulate_softmax_cross_entropy(activation(static_cast<int>(layers_.size() - 1), x), labels, loss_rows(n),
                                           spec_.classes(), nullptr, 0.0f, spec_.label_smoothing());
}

backend::LossSums Network::evaluate(const float* x, const std::int32_t* labels, int n) {
  enqueue_evaluate(x, labels, n);
  return take_loss_sums();
}

const float* Network::infer(const float* x, int n) {
  Pass pass;
  pass.training = false;
  forward(x, n, pass);
  return activation(static_cast<int>(layers_.size() - 1), x);
}

backend::LossSums Network::take_loss_sums() { return device_.take_loss_sums(); }

double Network::last_forward_s() { return device_.seconds_between(0, 1); }
double Network::last_backward_s() { return device_.seconds_between(1, 2); }

}  // namespace drt::nn
