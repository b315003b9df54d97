#include "onednn_conv.hpp"

#include <dnnl.hpp>
#include <unordered_map>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::backend {

using dnnl::memory;
using Tag = memory::format_tag;

struct OneDnnConv::Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

namespace {

// A tensor as the caller holds it (plain layout, the caller's pointer) and as a primitive wants it.
struct Operand {
  memory user;            // plain layout; data handle set per call
  memory wanted;          // the primitive's layout (== user when they agree)
  dnnl::reorder in, out;  // user -> wanted, wanted -> user (only when they differ)

  Operand(const dnnl::engine& e, const memory::desc& plain, const memory::desc& want)
      : user(plain, e, DNNL_MEMORY_NONE), wanted(want == plain ? user : memory(want, e)) {
    if (want != plain) {
      in = dnnl::reorder(user, wanted);
      out = dnnl::reorder(wanted, user);
    }
  }
  bool reordered() const { return wanted != user; }
  // Points the user memory at `data`, and brings it into the wanted layout for reading.
  const memory& read(dnnl::stream& s, const float* data) {
    user.set_data_handle(const_cast<float*>(data));
    if (reordered()) in.execute(s, user, wanted);
    return wanted;
  }
  // Points the user memory at `data`; call written() after the primitive ran.
  const memory& write(float* data) {
    user.set_data_handle(data);
    return wanted;
  }
  void written(dnnl::stream& s) {
    if (reordered()) out.execute(s, wanted, user);
  }
};

}  // namespace

struct OneDnnConv::Plan {
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data backward_data;
  dnnl::convolution_backward_weights backward_weights;
  std::unique_ptr<Operand> f_src, f_wei, f_bias, f_dst;                 // forward
  std::unique_ptr<Operand> d_diff_dst, d_wei, d_diff_src;               // backward data
  std::unique_ptr<Operand> w_src, w_diff_dst, w_diff_wei, w_diff_bias;  // backward weights
};

OneDnnConv::OneDnnConv() : engine_(std::make_unique<Engine>()) {}
OneDnnConv::~OneDnnConv() = default;

OneDnnConv::Plan& OneDnnConv::plan(const Conv2dShape& s, bool bias) {
  const Key key(s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel, s.stride, s.pad, s.groups, bias);
  auto& slot = plans_[key];
  if (slot) return *slot;
  const dnnl::engine& e = engine_->engine;
  const memory::dims src{s.batch, s.in_channels, s.height, s.width};
  // Grouped: [groups x out/groups x in/groups x k x k], the same bytes as [out x in/groups x k x k].
  const bool grouped = s.groups > 1;
  const memory::dims wei = grouped ? memory::dims{s.groups, s.out_per_group(), s.in_per_group(), s.kernel, s.kernel}
                                   : memory::dims{s.out_channels, s.in_channels, s.kernel, s.kernel};
  const memory::dims bias_dims{s.out_channels};
  const memory::dims dst{s.batch, s.out_channels, s.out_height(), s.out_width()};
  const memory::dims strides{s.stride, s.stride}, pad{s.pad, s.pad};
  const auto f32 = memory::data_type::f32;
  const memory::desc src_plain(src, f32, Tag::nchw), wei_plain(wei, f32, grouped ? Tag::goihw : Tag::oihw),
      bias_plain(bias_dims, f32, Tag::x), dst_plain(dst, f32, Tag::nchw);
  const memory::desc src_any(src, f32, Tag::any), wei_any(wei, f32, Tag::any), dst_any(dst, f32, Tag::any);
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto training = dnnl::prop_kind::forward_training;
  using Forward = dnnl::convolution_forward;
  using BackwardWeights = dnnl::convolution_backward_weights;
  auto p = std::make_unique<Plan>();
  const Forward::primitive_desc fpd(
      bias ? Forward::desc(training, algo, src_any, wei_any, bias_plain, dst_any, strides, pad, pad)
           : Forward::desc(training, algo, src_any, wei_any, dst_any, strides, pad, pad),
      e);
  const dnnl::convolution_backward_data::primitive_desc dpd(
      dnnl::convolution_backward_data::desc(algo, src_any, wei_any, dst_any, strides, pad, pad), e, fpd);
  const BackwardWeights::primitive_desc wpd(
      bias ? BackwardWeights::desc(algo, src_any, wei_any, bias_plain, dst_any, strides, pad, pad)
           : BackwardWeights::desc(algo, src_any, wei_any, dst_any, strides, pad, pad),
      e, fpd);
  p->forward = Forward(fpd);
  p->backward_data = dnnl::convolution_backward_data(dpd);
  p->backward_weights = BackwardWeights(wpd);
  p->f_src = std::make_unique<Operand>(e, src_plain, fpd.src_desc());
  p->f_wei = std::make_unique<Operand>(e, wei_plain, fpd.weights_desc());
  p->f_dst = std::make_unique<Operand>(e, dst_plain, fpd.dst_desc());
  p->d_diff_dst = std::make_unique<Operand>(e, dst_plain, dpd.diff_dst_desc());
  p->d_wei = std::make_unique<Operand>(e, wei_plain, dpd.weights_desc());
  p->d_diff_src = std::make_unique<Operand>(e, src_plain, dpd.diff_src_desc());
  p->w_src = std::make_unique<Operand>(e, src_plain, wpd.src_desc());
  p->w_diff_dst = std::make_unique<Operand>(e, dst_plain, wpd.diff_dst_desc());
  p->w_diff_wei = std::make_unique<Operand>(e, wei_plain, wpd.diff_weights_desc());
  if (bias) {
    p->f_bias = std::make_unique<Operand>(e, bias_plain, fpd.bias_desc());
    p->w_diff_bias = std::make_unique<Operand>(e, bias_plain, wpd.diff_bias_desc());
  }
  slot = std::move(p);
  return *slot;
}

void OneDnnConv::forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  Plan& p = plan(s, bias != nullptr);
  dnnl::stream& st = engine_->stream;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, p.f_src->read(st, x)},
                                       {DNNL_ARG_WEIGHTS, p.f_wei->read(st, w)},
                                       {DNNL_ARG_DST, p.f_dst->write(y)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, p.f_bias->read(st, bias));
  p.forward.execute(st, args);
  p.f_dst->written(st);
  st.wait();
}

void OneDnnConv::backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dw,
                          float* dbias, float* dx) {
  Plan& p = plan(s, dbias != nullptr);
  dnnl::stream& st = engine_->stream;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, p.w_src->read(st, x)},
                                       {DNNL_ARG_DIFF_DST, p.w_diff_dst->read(st, dy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, p.w_diff_wei->write(dw)}};
  if (dbias) args.emplace(DNNL_ARG_DIFF_BIAS, p.w_diff_bias->write(dbias));
  p.backward_weights.execute(st, args);
  p.w_diff_wei->written(st);
  if (dbias) p.w_diff_bias->written(st);
  if (dx) {
    // Backward-data usually wants diff_dst in the layout backward-weights already has it in.
    const bool same = p.d_diff_dst->wanted.get_desc() == p.w_diff_dst->wanted.get_desc();
    const memory& diff_dst = same ? p.w_diff_dst->wanted : p.d_diff_dst->read(st, dy);
    p.backward_data.execute(st, {{DNNL_ARG_DIFF_DST, diff_dst},
                                 {DNNL_ARG_WEIGHTS, p.d_wei->read(st, w)},
                                 {DNNL_ARG_DIFF_SRC, p.d_diff_src->write(dx)}});
    p.d_diff_src->written(st);
  }
  st.wait();
}

}  // namespace drt::backend
