// Element-wise layers: activations, the pass-through of a fused relu, dropout
// and add.
#include "backend/cpu/plan.h"

#include "backend/cpu/dropout_mask.h"

namespace cohort::backend::cpu {
namespace {

class ActLayer final : public CpuLayer {
 public:
  // in_place: overwrite the input; done_by_input: the producer already applied this
  // relu (a conv or dense post-op), so only backward is left (in place, from dst).
  ActLayer(CpuPlan& plan, const LayerSpec& spec, int index, bool in_place, bool done_by_input = false)
      : CpuLayer(plan, spec, index), in_place_(in_place || done_by_input), done_by_input_(done_by_input) {}
  void build_forward() override {
    md_ = like(in().mem.get_desc(), dt_);
    in_place_ = in_place_ && md_ == in().mem.get_desc();
    require(in_place_ || !done_by_input_, "layer '", spec_.name, "': a fused relu must keep its input's layout");
    src_ = plan_.take(fwd, in().mem, md_);
    switch (spec_.act) {
      case ActKind::kRelu:
      case ActKind::kLeakyRelu:
        algo_ = in_place_ ? dnnl::algorithm::eltwise_relu_use_dst_for_bwd : dnnl::algorithm::eltwise_relu;
        break;
      case ActKind::kElu:
        algo_ = dnnl::algorithm::eltwise_elu;
        break;
      case ActKind::kTanh:
        algo_ = dnnl::algorithm::eltwise_tanh;
        break;
      case ActKind::kSigmoid:
        algo_ = dnnl::algorithm::eltwise_logistic;
        break;
    }
    alpha_ = spec_.act == ActKind::kLeakyRelu || spec_.act == ActKind::kElu ? spec_.alpha : 0.f;
    pd_ = dnnlc::eltwise_forward(eng(), fwd_prop(training()), algo_, md_, alpha_, 0.f);
    out().mem = in_place_ ? in().mem : memory(md_, eng());
    if (!done_by_input_) fwd.push_back({dnnlc::EltFwd(pd_), {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, out().mem}}, {}});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    memory dd = plan_.diff_source(bwd, out(), md_);
    if (done_by_input_ && plan_.relu_grad_by_consumer_[static_cast<size_t>(index_)]) {
      plan_.deliver(bwd, in(), dd, true);  // the max pooling after it applied this gradient
      return;
    }
    auto bpd = dnnlc::eltwise_backward(eng(), algo_, md_, md_, alpha_, 0.f, pd_);
    Items post;
    memory ds;
    if (in_place_ && !in().diff) {
      ds = dd;
      in().diff = dd;
    } else {
      ds = plan_.diff_target(post, in(), md_);
    }
    const int data_arg = in_place_ ? DNNL_ARG_DST : DNNL_ARG_SRC;
    memory data = in_place_ ? out().mem : src_;
    bwd.push_back({dnnlc::EltBwd(bpd), {{data_arg, data}, {DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_DIFF_SRC, ds}}, {}});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  bool in_place_, done_by_input_;
  dnnl::algorithm algo_{};
  float alpha_ = 0;
  memory::desc md_;
  dnnlc::EltFwd::primitive_desc pd_;
  memory src_;
};

// A layer whose work another layer does (a relu fused into the batch norm before
// it): its output and gradient are its input's.
class PassLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override { out().mem = in().mem; }
  void build_backward() override {
    if (!in().needs_grad) return;
    plan_.deliver(bwd, in(), plan_.diff_source(bwd, out(), in().mem.get_desc()), true);
  }
};

// The forward draws the keep mask (kernels::dropout_factor's draws) and keeps it for
// backward, which applies it to the gradient.
class DropoutLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    if (!training() || spec_.p <= 0.f) {
      out().mem = in().mem;
      identity_ = true;
      return;
    }
    // Element i of the mask is element i of the plain (NCHW or [N, F]) value, on any
    // device: a blocked layout is reordered to plain around the dropout.
    const memory::desc md = plain_md(in().shape, dt_);
    src_ = plan_.take(fwd, in().mem, md);
    out().mem = memory(md, eng());
    keep_.resize(static_cast<size_t>(CpuPlan::elems(src_)));
    fwd.push_back({{}, {}, [this] {
                     const uint64_t stream = (plan_.step_ << 20) ^ static_cast<uint64_t>(index_);
                     plan_.for_chunks(CpuPlan::elems(src_), [&](int64_t lo, int64_t hi) {
                       dropout_mask(keep_.data() + lo, hi - lo, static_cast<uint64_t>(lo), stream, plan_.opt_.seed,
                                    spec_.p);
                       apply(src_, out().mem, lo, hi);
                     });
                   }});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    const memory::desc md = out().mem.get_desc();
    memory dd = plan_.diff_source(bwd, out(), md);
    if (identity_) {
      plan_.deliver(bwd, in(), dd, true);
      return;
    }
    Items post;
    memory ds = plan_.diff_target(post, in(), md);
    bwd.push_back({{}, {}, [this, dd, ds] {
                     plan_.for_chunks(CpuPlan::elems(dd), [&](int64_t lo, int64_t hi) { apply(dd, ds, lo, hi); });
                   }});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  void apply(const memory& src, const memory& dst, int64_t lo, int64_t hi) const {
    const float scale = 1.f / (1.f - spec_.p);
    const uint8_t* keep = keep_.data() + lo;
    if (CpuPlan::dtype(src) == DType::kBF16)
      dropout_apply_mask(static_cast<const uint16_t*>(src.get_data_handle()) + lo,
                         static_cast<uint16_t*>(dst.get_data_handle()) + lo, keep, hi - lo, scale);
    else
      dropout_apply_mask(static_cast<const float*>(src.get_data_handle()) + lo,
                         static_cast<float*>(dst.get_data_handle()) + lo, keep, hi - lo, scale);
  }
  bool identity_ = false;
  memory src_;
  std::vector<uint8_t> keep_;
};

class AddLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    const memory::desc md = like(in(0).mem.get_desc(), dt_);
    std::vector<memory> ins;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) ins.push_back(plan_.take(fwd, in(static_cast<int>(i)).mem, md));
    out().mem = memory(md, eng());
    memory dst = out().mem;
    if (dt_ != dt::f32) {  // oneDNN's binary add, in place after the first pair
      const dnnl::binary add(dnnlc::binary_add(eng(), md));
      for (size_t k = 1; k < ins.size(); ++k)
        fwd.push_back(
            {add, {{DNNL_ARG_SRC_0, k == 1 ? ins[0] : dst}, {DNNL_ARG_SRC_1, ins[k]}, {DNNL_ARG_DST, dst}}, {}});
      return;
    }
    // f32: one vectorised pass over the buffers (oneDNN's sum is a slow generic kernel
    // for blocked layouts).
    fwd.push_back({{}, {}, [this, ins, dst] {
                     float* y = static_cast<float*>(dst.get_data_handle());
                     const float* a = static_cast<const float*>(ins[0].get_data_handle());
                     const float* b = static_cast<const float*>(ins[1].get_data_handle());
                     plan_.for_chunks(CpuPlan::elems(dst), [&](int64_t lo, int64_t hi) {
                       for (int64_t i = lo; i < hi; ++i) y[i] = a[i] + b[i];
                       for (size_t k = 2; k < ins.size(); ++k) {
                         const float* c = static_cast<const float*>(ins[k].get_data_handle());
                         for (int64_t i = lo; i < hi; ++i) y[i] += c[i];
                       }
                     });
                   }});
  }
  void build_backward() override {
    memory dd = plan_.diff_source(bwd, out(), out().mem.get_desc());
    bool aliased = false;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      Val& v = in(static_cast<int>(i));
      if (!v.needs_grad) continue;
      plan_.deliver(bwd, v, dd, !aliased && !v.diff);
      aliased = aliased || v.diff == dd;
    }
  }
};

}  // namespace

std::unique_ptr<CpuLayer> make_activation_layer(CpuPlan& plan, const LayerSpec& spec, int index, bool in_place,
                                                bool done_by_input) {
  return std::make_unique<ActLayer>(plan, spec, index, in_place, done_by_input);
}
std::unique_ptr<CpuLayer> make_pass_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<PassLayer>(plan, spec, index);
}
std::unique_ptr<CpuLayer> make_dropout_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<DropoutLayer>(plan, spec, index);
}
std::unique_ptr<CpuLayer> make_add_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<AddLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cpu
