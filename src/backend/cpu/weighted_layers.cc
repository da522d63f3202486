// Convolution and inner product (dense): the layers with weights.
#include <algorithm>
#include <cstring>

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
    src_md_ = s.size() == 2 ? plain_md(s, dt_) : nhwc_values_ ? plain_md(s, dt_, Layout::kNHWC) : any_md(s, dt_);
    w_any_ = any_md(dnnlc::dims_of(plain_w_), dt_);
    dnnl::primitive_attr attr;
    if (fused_relu) {
      dnnl::post_ops po;
      dnnlc::append_eltwise(po, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(po);
    }
    const memory::desc dst_md = nhwc_values_ ? plain_md(d, dt_, Layout::kNHWC) : any_md(d, dt_);
    fpd_ = fwd_pd(fwd_prop(training()), src_md_, w_any_, has_bias_ ? &bias_md_ : nullptr, dst_md, attr);
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
  bool nhwc_values_ = false;  // NHWC input and output rather than the layouts oneDNN prefers
  typename Fwd::primitive_desc fpd_;
  memory src_, w_;
};

// A 1x1 convolution without groups, dilation, padding or bias is a matrix product over
// the pixels of NHWC values: y[P, K] = x[P, C] · Wᵀ. Its backward is two more, over the
// output's P = N·OH·OW pixels: dW[K, C] = dyᵀ · x and dx[P, C] = dy · W, where x is
// taken (and dx written, zero elsewhere) at every stride-th pixel. On a CPU with AMX,
// oneDNN 2.6's bf16 backward convolutions of this form ran at a third to a quarter of
// the speed of its matrix products (docs/guides/performance.md).
class ConvLayer final : public WeightedLayer<dnnlc::ConvFwd, dnnlc::ConvBwdData, dnnlc::ConvBwdWeights> {
 public:
  using WeightedLayer::WeightedLayer;
  void build_forward() override {
    geo_ = geometry(spec_.win, in().shape, out().shape);
    const PointwiseBackward mode = plan_.opt_.pointwise_backward;
    nhwc_values_ = training() && pointwise() && mode == PointwiseBackward::kMatmul;
    WeightedLayer::build_forward();
  }
  void build_backward() override {
    if (by_matmul())
      build_matmul_backward();
    else
      WeightedLayer::build_backward();
  }

 private:
  bool pointwise() {
    auto zeros = [](const dims& v) { return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; }); };
    return spec_.groups == 1 && spec_.win.kh == 1 && spec_.win.kw == 1 && !spec_.bias && in().shape.size() == 4 &&
           zeros(geo_.pad_l) && zeros(geo_.pad_r) && zeros(geo_.dilation);
  }
  bool by_matmul() {
    const PointwiseBackward mode = plan_.opt_.pointwise_backward;
    if (!pointwise() || mode == PointwiseBackward::kConvolution) return false;
    if (fpd_.src_desc() != plain_md(in().shape, dt_, Layout::kNHWC) ||
        fpd_.dst_desc() != plain_md(out().shape, dt_, Layout::kNHWC))
      return false;
    // auto: where it was measured, oneDNN 2's bf16 convolutions on AMX (oneDNN 3 has
    // backward convolutions built on the same matrix kernels as its matmul)
    static const bool amx = probe_cpu_isa().amx;
    return mode == PointwiseBackward::kMatmul || (dt_ == dt::bf16 && amx && !dnnlc::kV3);
  }
  // A matrix of `rows` × `cols` elements `type` whose (i, j) lies at i·rs + j·cs.
  static memory::desc matrix(int64_t rows, int64_t cols, dt type, int64_t rs, int64_t cs) {
    return {{rows, cols}, type, dims{rs, cs}};
  }
  // Between NHWC `big` (the input's shape) and NHWC `small` (the output's pixels, the
  // input's channels): gather copies big's pixel (n, oy·sh, ox·sw) to small's (n, oy, ox);
  // else small's go back there and big's other pixels are zeroed. (The lattice's N·OH·OW
  // pixels are not a matrix's rows, which lie one stride apart.)
  void lattice_copy(Items& items, const memory& big, const memory& small, bool gather) {
    const dims &s = in().shape, &d = out().shape;
    const int64_t ih = s[2], iw = s[3], oh = d[2], ow = d[3], sh = geo_.strides[0], sw = geo_.strides[1];
    const size_t pixel = static_cast<size_t>(s[1]) * (dt_ == dt::f32 ? 4 : 2);
    CpuPlan* plan = &plan_;
    items.push_back({{},
                     {},
                     [=] {
                       char* b = static_cast<char*>(big.get_data_handle());
                       char* m = static_cast<char*>(small.get_data_handle());
                       plan->for_chunks(s[0] * ih * iw, [&](int64_t lo, int64_t hi) {
                         for (int64_t i = lo; i < hi; ++i) {
                           const int64_t n = i / (ih * iw), y = i / iw % ih, x = i % iw;
                           char* at = b + static_cast<size_t>(i) * pixel;
                           const bool on = y % sh == 0 && x % sw == 0;  // then y / sh < oh, x / sw < ow
                           char* to = on ? m + static_cast<size_t>((n * oh + y / sh) * ow + x / sw) * pixel : nullptr;
                           if (gather && on)
                             std::memcpy(to, at, pixel);
                           else if (!gather)
                             on ? std::memcpy(at, to, pixel) : std::memset(at, 0, pixel);
                         }
                       });
                     },
                     true});
  }
  void matmul(Items& items, const memory& a, const memory& b, const memory& c) {
    const auto pd = dnnlc::matmul(eng(), a.get_desc(), b.get_desc(), c.get_desc());
    items.push_back({dnnl::matmul(pd), {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}}, {}});
  }
  void build_matmul_backward() {
    const dims &s = in().shape, &d = out().shape;
    const int64_t c = s[1], k = d[1], p = d[0] * d[2] * d[3];
    const int64_t sh = geo_.strides[0], sw = geo_.strides[1];
    const bool strided = sh != 1 || sw != 1;
    ++plan_.matmul_backwards_;
    const memory dd = plan_.diff_source(bwd, out(), plain_md(d, dt_, Layout::kNHWC));
    memory x = src_;  // x at the output's pixels
    if (strided) {
      x = memory(plain_md({d[0], c, d[2], d[3]}, dt_, Layout::kNHWC), eng());
      lattice_copy(bwd, src_, x, true);
    }
    Items after;
    const memory dw = plan_.grad_out(after, spec_.params[0], plain_w_, plain_w_);
    matmul(bwd, plan_.view(bwd, dd, matrix(k, p, dt_, 1, k)), plan_.view(bwd, x, matrix(p, c, dt_, c, 1)),
           plan_.view(bwd, dw, matrix(k, c, dt::f32, c, 1)));
    for (auto& it : after) bwd.push_back(it);
    plan_.ready(bwd, spec_.params[0]);
    if (in().needs_grad) build_matmul_backward_data(dd, strided);
  }
  void build_matmul_backward_data(const memory& dd, bool strided) {
    const dims &s = in().shape, &d = out().shape;
    const int64_t c = s[1], k = d[1], p = d[0] * d[2] * d[3];
    const memory::desc dy = matrix(p, k, dt_, k, 1), dx = matrix(p, c, dt_, c, 1);
    const auto pd = dnnlc::matmul(eng(), dy, any_md({k, c}, dt_), dx);
    const memory master(matrix(k, c, dt::f32, c, 1), eng(), plan_.param_data(spec_.params[0]));
    const memory w = plan_.take(bwd, master, pd.weights_desc());
    Items post;
    const memory ds = plan_.diff_target(post, in(), plain_md(s, dt_, Layout::kNHWC));
    const memory compact = strided ? memory(plain_md({d[0], c, d[2], d[3]}, dt_, Layout::kNHWC), eng()) : ds;
    matmul(bwd, plan_.view(bwd, dd, dy), w, plan_.view(bwd, compact, dx));
    if (strided) lattice_copy(bwd, ds, compact, false);
    for (auto& it : post) bwd.push_back(it);
  }
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
