// Normalisation: batch norm (with the relu it may apply) and LRN.
#include "backend/cpu/plan.h"

#include <cstring>

namespace cohort::backend::cpu {
namespace {

// Statistics, scale and shift are f32 at every precision. oneDNN 2.x takes scale and
// shift packed into one [2, C] tensor (copied per step, C floats each); 3.x binds the
// parameters and their gradients directly.
class BatchNormLayer final : public CpuLayer {
 public:
  // fuse_relu: the relu that follows is applied here (one pass less each way).
  BatchNormLayer(CpuPlan& plan, const LayerSpec& spec, int index, bool fuse_relu)
      : CpuLayer(plan, spec, index), fuse_relu_(fuse_relu) {}
  void build_forward() override {
    md_ = like(in().mem.get_desc(), dt_);
    src_ = plan_.take(fwd, in().mem, md_);
    auto flags = dnnlc::bn_scale_shift_flags();
    if (fuse_relu_) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
    if (!training()) flags = flags | dnnl::normalization_flags::use_global_stats;
    flags_ = flags;
    pd_ = dnnlc::bn_forward(eng(), fwd_prop(training()), md_, spec_.eps, flags);
    const int64_t c = out().shape[1];
    cmd_ = memory::desc({c}, dt::f32, tag::a);
    auto st = [&](int i) { return plan_.state_data(spec_.states[static_cast<size_t>(i)]); };
    out().mem = memory(pd_.dst_desc(), eng());
    if (training()) {
      mean_ = memory(pd_.mean_desc(), eng());
      var_ = memory(pd_.variance_desc(), eng());
    } else {
      mean_ = memory(cmd_, eng(), st(0));
      var_ = memory(cmd_, eng(), st(1));
    }
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, out().mem}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, var_}};
    bind_scale_shift(fwd, args, true);
    if (fuse_relu_ && training()) {
      ws_ = memory(pd_.workspace_desc(), eng());
      args[DNNL_ARG_WORKSPACE] = ws_;
    }
    fwd.push_back({dnnlc::BnFwd(pd_), args, {}});
    if (!training()) return;
    int64_t count = 1;
    for (size_t i = 0; i < out().shape.size(); ++i)
      if (i != 1) count *= out().shape[i];
    float* rm = st(0);
    float* rv = st(1);
    const float m = spec_.momentum;
    const float unbias = count > 1 ? static_cast<float>(count) / static_cast<float>(count - 1) : 1.f;
    fwd.push_back({{}, {}, [this, rm, rv, m, unbias, c] {
                     const float* bm = static_cast<const float*>(mean_.get_data_handle());
                     const float* bv = static_cast<const float*>(var_.get_data_handle());
                     for (int64_t i = 0; i < c; ++i) {
                       rm[i] = (1 - m) * rm[i] + m * bm[i];
                       rv[i] = (1 - m) * rv[i] + m * bv[i] * unbias;
                     }
                   }});
  }
  void build_backward() override {
    auto bpd = dnnlc::bn_backward(eng(), md_, md_, spec_.eps, flags_, pd_);
    Items post;
    memory dd = plan_.diff_source(bwd, out(), bpd.diff_dst_desc());
    memory ds =
        in().needs_grad ? plan_.diff_target(post, in(), bpd.diff_src_desc()) : memory(bpd.diff_src_desc(), eng());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_},
                                         {DNNL_ARG_MEAN, mean_},
                                         {DNNL_ARG_VARIANCE, var_},
                                         {DNNL_ARG_DIFF_DST, dd},
                                         {DNNL_ARG_DIFF_SRC, ds}};
    bind_scale_shift(bwd, args, false);
    if (ws_) args[DNNL_ARG_WORKSPACE] = ws_;
    float* dscale = plan_.grad_data(spec_.params[0]);
    float* dshift = plan_.grad_data(spec_.params[1]);
    const int64_t c = out().shape[1];
    if constexpr (dnnlc::kPackedScaleShift) {
      memory dss(bpd.diff_weights_desc(), eng());
      args[dnnlc::kArgDiffScaleShift] = dss;
      bwd.push_back({dnnlc::BnBwd(bpd), args, {}});
      bwd.push_back({{}, {}, [dss, dscale, dshift, c] {
                       const float* d = static_cast<const float*>(dss.get_data_handle());
                       std::memcpy(dscale, d, static_cast<size_t>(c) * sizeof(float));
                       std::memcpy(dshift, d + c, static_cast<size_t>(c) * sizeof(float));
                     }});
    } else {
      args[dnnlc::kArgDiffScale] = memory(cmd_, eng(), dscale);
      args[dnnlc::kArgDiffShift] = memory(cmd_, eng(), dshift);
      bwd.push_back({dnnlc::BnBwd(bpd), args, {}});
    }
    plan_.ready(bwd, spec_.params[0]);
    plan_.ready(bwd, spec_.params[1]);
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  // Scale and shift as arguments: the parameters themselves (3.x's backward takes no
  // shift: passing one fails its execution), or (2.x) a packed copy refreshed by the
  // first forward item.
  void bind_scale_shift(Items& items, std::unordered_map<int, memory>& args, bool forward) {
    float* scale = plan_.param_data(spec_.params[0]);
    float* shift = plan_.param_data(spec_.params[1]);
    if constexpr (dnnlc::kPackedScaleShift) {
      if (!ss_) {
        const int64_t c = out().shape[1];
        ss_ = memory(pd_.weights_desc(), eng());
        items.push_back({{}, {}, [this, scale, shift, c] {
                           float* ss = static_cast<float*>(ss_.get_data_handle());
                           std::memcpy(ss, scale, static_cast<size_t>(c) * sizeof(float));
                           std::memcpy(ss + c, shift, static_cast<size_t>(c) * sizeof(float));
                         }});
      }
      args[dnnlc::kArgScaleShift] = ss_;
    } else {
      args[dnnlc::kArgScale] = memory(cmd_, eng(), scale);
      if (forward) args[dnnlc::kArgShift] = memory(cmd_, eng(), shift);
    }
  }
  bool fuse_relu_;
  memory::desc md_, cmd_;
  dnnl::normalization_flags flags_{};
  dnnlc::BnFwd::primitive_desc pd_;
  memory src_, ss_, mean_, var_, ws_;
};

class LrnLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    md_ = like(in().mem.get_desc(), dt_);
    src_ = plan_.take(fwd, in().mem, md_);
    lp_ = {spec_.lrn_size, spec_.lrn_alpha, spec_.lrn_beta, spec_.lrn_k};
    pd_ = dnnlc::lrn_forward(eng(), fwd_prop(training()), md_, lp_);
    out().mem = memory(pd_.dst_desc(), eng());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, out().mem}};
    if (training() && pd_.workspace_desc().get_size() > 0) {
      ws_ = memory(pd_.workspace_desc(), eng());
      args[DNNL_ARG_WORKSPACE] = ws_;
    }
    fwd.push_back({dnnlc::LrnFwd(pd_), args, {}});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    auto bpd = dnnlc::lrn_backward(eng(), out().mem.get_desc(), md_, lp_, pd_);
    memory dd = plan_.diff_source(bwd, out(), bpd.diff_dst_desc());
    Items post;
    memory ds = plan_.diff_target(post, in(), bpd.diff_src_desc());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_DIFF_SRC, ds}};
    if (ws_) args[DNNL_ARG_WORKSPACE] = ws_;
    bwd.push_back({dnnlc::LrnBwd(bpd), args, {}});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  memory::desc md_;
  dnnlc::LrnParams lp_{};
  dnnlc::LrnFwd::primitive_desc pd_;
  memory src_, ws_;
};

}  // namespace

std::unique_ptr<CpuLayer> make_batch_norm_layer(CpuPlan& plan, const LayerSpec& spec, int index, bool fuse_relu) {
  return std::make_unique<BatchNormLayer>(plan, spec, index, fuse_relu);
}
std::unique_ptr<CpuLayer> make_lrn_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<LrnLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cpu
