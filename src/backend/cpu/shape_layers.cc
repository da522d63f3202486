// Layers that move data without arithmetic: the input, concat, flatten and the
// ResNet option-A shortcut.
#include "backend/cpu/plan.h"

#include <cstring>

namespace cohort::backend::cpu {
namespace {

class InputLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    out().mem = memory(plain_md(out().shape, dt::f32, plan_.opt_.layout), eng(), nullptr);
  }
};

// Convolution and inner product share their structure: weights (+ bias), forward,
// backward-weights (first, so gradients are ready early), backward-data. Weights are
// cast from their f32 masters by the reorder that blocks them; weight and bias

class ConcatLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    std::vector<memory::desc> srcs;
    std::unordered_map<int, memory> args;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      const memory& m = in(static_cast<int>(i)).mem;
      memory src = plan_.take(fwd, m, like(m.get_desc(), dt_));
      srcs.push_back(src.get_desc());
      args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = src;
    }
    auto pd = dnnlc::concat(eng(), nullptr, 1, srcs);
    memory::desc dst = pd.dst_desc();
    if (!views_ok(dst)) {
      dst = plain_md(out().shape, dt_);
      pd = dnnlc::concat(eng(), &dst, 1, srcs);
    }
    out().mem = memory(pd.dst_desc(), eng());
    args[DNNL_ARG_DST] = out().mem;
    fwd.push_back({dnnl::concat(pd), args, {}});
  }
  void build_backward() override {
    const memory::desc md = out().mem.get_desc();
    memory dd = plan_.diff_source(bwd, out(), md);
    int64_t off = 0;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      Val& v = in(static_cast<int>(i));
      const int64_t c = v.shape[1];
      if (v.needs_grad) {
        dims sub = out().shape;
        sub[1] = c;
        dims offs(sub.size(), 0);
        offs[1] = off;
        memory view(md.submemory_desc(sub, offs), eng(), dd.get_data_handle());
        Items post;
        memory ds = plan_.diff_target(post, v, like(v.mem.get_desc(), dt_));
        CpuPlan::reorder(bwd, view, ds);
        for (auto& it : post) bwd.push_back(it);
      }
      off += c;
    }
  }

 private:
  bool views_ok(const memory::desc& dst) {
    try {
      int64_t off = 0;
      for (size_t i = 0; i < spec_.inputs.size(); ++i) {
        dims sub = out().shape;
        sub[1] = in(static_cast<int>(i)).shape[1];
        dims offs(sub.size(), 0);
        offs[1] = off;
        (void)dst.submemory_desc(sub, offs);
        off += sub[1];
      }
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }
};

class FlattenLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    if (in().shape.size() == 2) {
      out().mem = plan_.take(fwd, in().mem, plain_md(out().shape, dt_));
      return;
    }
    // A plain input is the output itself (a view), unless it is the batch, whose
    // memory each step sets; anything else is reordered to plain.
    if (in().mem.get_desc() == plain_md(in().shape, dt_) && in().mem.get_data_handle() != nullptr) {
      plain4_ = in().mem;
    } else {
      plain4_ = memory(plain_md(in().shape, dt_), eng());
      CpuPlan::reorder(fwd, in().mem, plain4_);
    }
    out().mem = memory(plain_md(out().shape, dt_), eng(), plain4_.get_data_handle());
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    memory d2 = plan_.diff_source(bwd, out(), plain_md(out().shape, dt_));
    if (in().shape.size() == 2) {
      plan_.deliver(bwd, in(), d2, true);
      return;
    }
    memory d4(plain_md(in().shape, dt_), eng(), d2.get_data_handle());
    plan_.deliver(bwd, in(), d4, true);
    keep_ = d4;
  }

 private:
  memory plain4_, keep_;
};

class ShortcutALayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    src_ = plan_.take(fwd, in().mem, plain_md(in().shape, dt_));
    out().mem = memory(plain_md(out().shape, dt_), eng());
    fwd.push_back({{}, {}, [this] { move(true, src_.get_data_handle(), out().mem.get_data_handle()); }});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    memory dd = plan_.diff_source(bwd, out(), plain_md(out().shape, dt_));
    Items post;
    memory ds = plan_.diff_target(post, in(), plain_md(in().shape, dt_));
    bwd.push_back({{}, {}, [this, dd, ds] { move(false, ds.get_data_handle(), dd.get_data_handle()); }});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  void move(bool forward, void* x, void* y) const {
    if (dt_ == dt::f32)
      move_as(forward, static_cast<float*>(x), static_cast<float*>(y));
    else
      move_as(forward, static_cast<uint16_t*>(x), static_cast<uint16_t*>(y));
  }
  // Forward: y[n, c + pad, h, w] = x[n, c, s*h, s*w], other channels 0. Backward is
  // the transpose (gradient positions not sampled are 0). Pure data movement, so
  // bf16 values move as their bits.
  template <typename T>
  void move_as(bool forward, T* x, T* y) const {
    const dims& is = in().shape;
    const dims& os = plan_.vals_[static_cast<size_t>(index_)].shape;
    const int64_t n = is[0], ci = is[1], hi = is[2], wi = is[3], co = os[1], ho = os[2], wo = os[3];
    const int64_t s = spec_.win.sh, pad = (co - ci) / 2;
    if (forward)
      std::memset(y, 0, static_cast<size_t>(n * co * ho * wo) * sizeof(T));
    else
      std::memset(x, 0, static_cast<size_t>(n * ci * hi * wi) * sizeof(T));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < ci; ++c)
        for (int64_t h = 0; h < ho; ++h)
          for (int64_t w = 0; w < wo; ++w) {
            T& xv = x[((b * ci + c) * hi + h * s) * wi + w * s];
            T& yv = y[((b * co + c + pad) * ho + h) * wo + w];
            if (forward)
              yv = xv;
            else
              xv = yv;
          }
  }
  const Val& in() const { return plan_.vals_[static_cast<size_t>(spec_.inputs[0])]; }
  Val& in() { return CpuLayer::in(); }
  memory src_;
};

}  // namespace

std::unique_ptr<CpuLayer> make_input_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<InputLayer>(plan, spec, index);
}
std::unique_ptr<CpuLayer> make_concat_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<ConcatLayer>(plan, spec, index);
}
std::unique_ptr<CpuLayer> make_flatten_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<FlattenLayer>(plan, spec, index);
}
std::unique_ptr<CpuLayer> make_shortcut_a_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<ShortcutALayer>(plan, spec, index);
}

}  // namespace cohort::backend::cpu
