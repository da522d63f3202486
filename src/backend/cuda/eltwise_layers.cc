// Element-wise layers on the kernels/ functors, in the layer's type: the activations
// (relu, leaky relu, elu, tanh, sigmoid: kernels::act_forward, the CPU backend's math),
// dropout (kernels::dropout_factor's masks, the CPU backend's) and add; a relu (and an add
// before it) its batch norm applies (fusion.h) is a view of the batch norm's value.
#include "backend/cuda/plan.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"

namespace cohort::backend::cuda {
namespace {

kernels::Act act_of(const LayerSpec& spec) {
  switch (spec.act) {
    case ActKind::kRelu:
    case ActKind::kLeakyRelu:
      return kernels::Act::kRelu;
    case ActKind::kElu:
      return kernels::Act::kElu;
    case ActKind::kTanh:
      return kernels::Act::kTanh;
    case ActKind::kSigmoid:
      return kernels::Act::kSigmoid;
  }
  fail(Code::kInternal, "layer '", spec.name, "': unknown activation ", static_cast<int>(spec.act));
}

class ActLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    alloc_out();
    act_ = act_of(spec_);
    // relu is leaky relu with slope 0; elu's alpha is its scale below 0
    alpha_ = spec_.act == ActKind::kLeakyRelu || spec_.act == ActKind::kElu ? spec_.alpha : 0.f;
    with_type(dtype(), [&]<typename S, typename C>() {
      fwd.push_back({[this] {
        kernels::for_each(cstream(), out().numel(), kernels::ActForward<S, C>{act_, alpha_}, out().xs<S>(),
                          in().cxs<S>());
      }});
    });
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      with_type(dtype(), [&]<typename S, typename C>() {
        bwd.push_back({[this, acc] {
          kernels::for_each(cstream(), in().numel(), kernels::ActBackward<S, C>{act_, alpha_, acc}, in().dxs<S>(),
                            out().cdxs<S>(), in().cxs<S>(), out().cxs<S>());
        }});
      });
    }
    plan_.grad_done(bwd, out());
  }

 private:
  kernels::Act act_ = kernels::Act::kRelu;
  float alpha_ = 0.f;
};

// Dropout's stream of draws is (step << 20) ^ layer, as on the CPU, and element i of
// the mask is element i of the NCHW value whatever the layout (kernels::nchw_index).
class DropoutLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    identity_ = !training() || spec_.p <= 0.f;
    if (identity_) {  // the input's memory (with graphs the same every pass: a replay needs no step)
      fwd.push_back({[this] { out().out = in().out; }});
      return;
    }
    alloc_out();
    with_type(dtype(), [&]<typename S, typename C>() {
      fwd.push_back({[this] {
                       const kernels::DropoutForward<S, C> f{draws(), plan_.opt_.seed, spec_.p, channels(), pixels()};
                       kernels::for_each(cstream(), out().numel(), f, out().xs<S>(), in().cxs<S>());
                     },
                     0, false, StepKind::kHost});  // the draws are the step's
    });
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      with_type(dtype(), [&]<typename S, typename C>() {
        bwd.push_back(
            {[this, acc] {
               if (identity_) {
                 kernels::for_each(cstream(), in().numel(), kernels::CopyTo<S, C>{acc}, in().dxs<S>(), out().cdxs<S>());
                 return;
               }
               const kernels::DropoutBackward<S, C> f{draws(), plan_.opt_.seed, spec_.p, acc, channels(), pixels()};
               kernels::for_each(cstream(), in().numel(), f, in().dxs<S>(), out().cdxs<S>());
             },
             0, false, identity_ ? StepKind::kDevice : StepKind::kHost});  // the draws are the step's
      });
    }
    plan_.grad_done(bwd, out());
  }

 private:
  uint64_t draws() const { return (plan_.step_ << 20) ^ static_cast<uint64_t>(index_); }
  int64_t channels() const { return out().nhwc_hw() > 0 ? out().desc.dims[1] : 0; }
  int64_t pixels() const { return out().nhwc_hw(); }
  bool identity_ = false;
};

class AddLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    alloc_out();
    with_type(dtype(), [&]<typename S, typename C>() {
      fwd.push_back({[this] {
        const int64_t n = out().numel();
        kernels::for_each(cstream(), n, kernels::Sum2<S, C>{}, out().xs<S>(), in(0).cxs<S>(), in(1).cxs<S>());
        for (size_t k = 2; k < spec_.inputs.size(); ++k)
          kernels::for_each(cstream(), n, kernels::CopyTo<S, C>{true}, out().xs<S>(), in(static_cast<int>(k)).cxs<S>());
      }});
    });
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    for (size_t k = 0; k < spec_.inputs.size(); ++k) {
      DVal& v = in(static_cast<int>(k));
      if (!v.needs_grad) continue;
      const bool acc = plan_.grad_write(bwd, v);
      with_type(dtype(), [&]<typename S, typename C>() {
        bwd.push_back({[this, p = &v, acc] {
          kernels::for_each(cstream(), p->numel(), kernels::CopyTo<S, C>{acc}, p->dxs<S>(), out().cdxs<S>());
        }});
      });
    }
    plan_.grad_done(bwd, out());
  }
};

// A relu, or the add before it, that its batch norm applies (fusion.h): its value is
// the batch norm's output, the same memory, and the gradient it receives passes to the
// layer it reads that holds it (the batch norm, or the folded add), as that one's own.
class FoldedLayer final : public CudaLayer {
 public:
  FoldedLayer(CudaPlan& plan, const LayerSpec& spec, int index)
      : CudaLayer(plan, spec, index), source_(plan.fusion_.folded.at(static_cast<size_t>(index))) {}

  void build_forward() override {
    const DVal& src = plan_.vals_.at(static_cast<size_t>(source_));
    bool reads_it = false;
    for (size_t k = 0; k < spec_.inputs.size(); ++k)
      reads_it = reads_it || (spec_.inputs[k] == source_ && &in(static_cast<int>(k)) == &src);
    if (!reads_it)
      fail(Code::kInternal, "layer '", spec_.name, "': a layer fused into its batch norm reads a cast of it");
    out().out = src.out;
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());  // what casts of its value received, and zero if nothing
    DVal* src = &plan_.vals_.at(static_cast<size_t>(source_));
    src->writers++;  // the source reads it as its own gradient, once its backward runs
    // It moves a tensor on the host; with graphs both keep the memory, shared, from the
    // capture on, so a replay needs the step no more.
    bwd.push_back({[src, v = &out(), keep = plan_.graphs()] {
      src->grad = v->grad;
      if (!keep) v->grad = Tensor();
    }});
  }

 private:
  int source_;
};

}  // namespace

std::unique_ptr<CudaLayer> make_activation_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  if (plan.fusion_.folded.at(static_cast<size_t>(index)) >= 0) return std::make_unique<FoldedLayer>(plan, spec, index);
  return std::make_unique<ActLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_dropout_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<DropoutLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_add_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  if (plan.fusion_.folded.at(static_cast<size_t>(index)) >= 0) return std::make_unique<FoldedLayer>(plan, spec, index);
  return std::make_unique<AddLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda
