// Convolution and inner product (dense): the layers with weights.
#include "backend/cpu/plan.h"

namespace cohort::backend::cpu {
namespace {

// Convolution and inner product share their structure: weights (+ bias), forward,
// backward-weights (first, so gradients are ready early), backward-data. Weights are
// cast from their f32 masters by the reorder that blocks them; weight and bias
// gradients are f32 whatever the layer computes in.
template <typename Fwd, typename BwdData, typename BwdWeights>
class WeightedLayer : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    const dims& s = in().shape;
    const dims& d = out().shape;
    plain_w_ = weights_plain();
    has_bias_ = spec_.bias;
    bias_md_ = memory::desc({d[1]}, dt::f32, tag::a);
    src_md_ = s.size() == 2 ? plain_md(s, dt_) : any_md(s, dt_);
    w_any_ = any_md(dnnlc::dims_of(plain_w_), dt_);
    dnnl::primitive_attr attr;
    if (fused_relu) {
      dnnl::post_ops po;
      dnnlc::append_eltwise(po, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(po);
    }
    fpd_ = fwd_pd(fwd_prop(training()), src_md_, w_any_, has_bias_ ? &bias_md_ : nullptr, any_md(d, dt_), attr);
    src_ = plan_.take(fwd, in().mem, fpd_.src_desc());
    w_ = plan_.param_in(fwd, spec_.params[0], plain_w_, fpd_.weights_desc());
    out().mem = memory(fpd_.dst_desc(), eng());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_DST, out().mem}};
    if (has_bias_) args[DNNL_ARG_BIAS] = memory(bias_md_, eng(), plan_.param_data(spec_.params[1]));
    fwd.push_back({Fwd(fpd_), args, {}});
  }
  void build_backward() override {
    const memory::desc dw_any = any_md(dnnlc::dims_of(plain_w_), dt::f32);
    auto wpd = bwd_weights_pd(src_md_, dw_any, has_bias_ ? &bias_md_ : nullptr, any_md(out().shape, dt_));
    Items after;
    memory src = plan_.take(bwd, src_, wpd.src_desc());
    memory dd = plan_.diff_source(bwd, out(), wpd.diff_dst_desc());
    memory dw = plan_.grad_out(after, spec_.params[0], plain_w_, wpd.diff_weights_desc());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
    if (has_bias_) args[DNNL_ARG_DIFF_BIAS] = memory(bias_md_, eng(), plan_.grad_data(spec_.params[1]));
    bwd.push_back({BwdWeights(wpd), args, {}});
    for (auto& it : after) bwd.push_back(it);
    plan_.ready(bwd, spec_.params[0]);
    if (has_bias_) plan_.ready(bwd, spec_.params[1]);
    if (!in().needs_grad) return;
    auto dpd =
        bwd_data_pd(in().shape.size() == 2 ? src_md_ : any_md(in().shape, dt_), w_any_, any_md(out().shape, dt_));
    Items post;
    memory dd2 = plan_.diff_source(bwd, out(), dpd.diff_dst_desc());
    memory w = plan_.take(bwd, w_, dpd.weights_desc());
    memory ds = plan_.diff_target(post, in(), dpd.diff_src_desc());
    bwd.push_back({BwdData(dpd), {{DNNL_ARG_DIFF_DST, dd2}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, ds}}, {}});
    for (auto& it : post) bwd.push_back(it);
  }

 protected:
  virtual memory::desc weights_plain() const = 0;
  virtual typename Fwd::primitive_desc fwd_pd(dnnl::prop_kind pk, const memory::desc& s, const memory::desc& w,
                                              const memory::desc* bias, const memory::desc& d,
                                              const dnnl::primitive_attr& attr) = 0;
  virtual typename BwdData::primitive_desc bwd_data_pd(const memory::desc& s, const memory::desc& w,
                                                       const memory::desc& d) = 0;
  virtual typename BwdWeights::primitive_desc bwd_weights_pd(const memory::desc& s, const memory::desc& w,
                                                             const memory::desc* bias, const memory::desc& d) = 0;
  memory::desc bias_md_, src_md_, w_any_, plain_w_;
  bool has_bias_ = false;
  typename Fwd::primitive_desc fpd_;
  memory src_, w_;
};

class ConvLayer final : public WeightedLayer<dnnlc::ConvFwd, dnnlc::ConvBwdData, dnnlc::ConvBwdWeights> {
 public:
  using WeightedLayer::WeightedLayer;
  void build_forward() override {
    geo_ = geometry(spec_.win, in().shape, out().shape);
    WeightedLayer::build_forward();
  }

 private:
  memory::desc weights_plain() const override {
    const auto& w = spec_.win;
    const int64_t o = spec_.out_channels, i = plan_.vals_[static_cast<size_t>(spec_.inputs[0])].shape[1];
    const int64_t g = spec_.groups;
    if (g == 1) return {{o, i, w.kh, w.kw}, dt::f32, tag::oihw};
    return {{g, o / g, i / g, w.kh, w.kw}, dt::f32, tag::goihw};
  }
  dnnlc::ConvFwd::primitive_desc fwd_pd(dnnl::prop_kind pk, const memory::desc& s, const memory::desc& w,
                                        const memory::desc* bias, const memory::desc& d,
                                        const dnnl::primitive_attr& attr) override {
    return dnnlc::conv_forward(eng(), pk, s, w, bias, d, geo_, attr);
  }
  dnnlc::ConvBwdData::primitive_desc bwd_data_pd(const memory::desc& s, const memory::desc& w,
                                                 const memory::desc& d) override {
    return dnnlc::conv_backward_data(eng(), s, w, d, geo_, fpd_);
  }
  dnnlc::ConvBwdWeights::primitive_desc bwd_weights_pd(const memory::desc& s, const memory::desc& w,
                                                       const memory::desc* bias, const memory::desc& d) override {
    return dnnlc::conv_backward_weights(eng(), s, w, bias, d, geo_, fpd_);
  }
  dnnlc::Geometry geo_;
};

class DenseLayer final : public WeightedLayer<dnnlc::IpFwd, dnnlc::IpBwdData, dnnlc::IpBwdWeights> {
 public:
  using WeightedLayer::WeightedLayer;

 private:
  memory::desc weights_plain() const override {
    const int64_t i = plan_.vals_[static_cast<size_t>(spec_.inputs[0])].shape[1];
    return {{spec_.out_channels, i}, dt::f32, tag::oi};
  }
  dnnlc::IpFwd::primitive_desc fwd_pd(dnnl::prop_kind pk, const memory::desc& s, const memory::desc& w,
                                      const memory::desc* bias, const memory::desc& d,
                                      const dnnl::primitive_attr& attr) override {
    return dnnlc::ip_forward(eng(), pk, s, w, bias, d, attr);
  }
  dnnlc::IpBwdData::primitive_desc bwd_data_pd(const memory::desc& s, const memory::desc& w,
                                               const memory::desc& d) override {
    return dnnlc::ip_backward_data(eng(), s, w, d, fpd_);
  }
  dnnlc::IpBwdWeights::primitive_desc bwd_weights_pd(const memory::desc& s, const memory::desc& w,
                                                     const memory::desc* bias, const memory::desc& d) override {
    return dnnlc::ip_backward_weights(eng(), s, w, bias, d, fpd_);
  }
};

}  // namespace

std::unique_ptr<CpuLayer> make_conv_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<ConvLayer>(plan, spec, index);
}
std::unique_ptr<CpuLayer> make_dense_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<DenseLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cpu
