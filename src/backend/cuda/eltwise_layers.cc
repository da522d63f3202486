// Element-wise layers: relu, elu, tanh and sigmoid on cuDNN's activations; leaky relu,
// dropout and add on the kernels/ functors (dropout draws kernels::dropout_factor's
// masks, the CPU backend's).
#include "backend/cuda/plan.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"

namespace cohort::backend::cuda {
namespace {

class ActLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    out().out = plan_.alloc(Shape(out().desc.dims.begin(), out().desc.dims.end()));
    leaky_ = spec_.act == ActKind::kLeakyRelu;
    if (leaky_) {
      fwd.push_back({[this] {
        kernels::for_each(cstream(), out().numel(), kernels::LeakyReluForward{spec_.alpha}, out().x(),
                          static_cast<const float*>(in().x()));
      }});
      return;
    }
    cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
    double coef = 0;
    switch (spec_.act) {
      case ActKind::kRelu:
      case ActKind::kLeakyRelu:
        break;
      case ActKind::kElu:
        mode = CUDNN_ACTIVATION_ELU;
        coef = spec_.alpha;
        break;
      case ActKind::kTanh:
        mode = CUDNN_ACTIVATION_TANH;
        break;
      case ActKind::kSigmoid:
        mode = CUDNN_ACTIVATION_SIGMOID;
        break;
    }
    check(cudnnSetActivationDescriptor(act_, mode, CUDNN_NOT_PROPAGATE_NAN, coef), "cudnnSetActivationDescriptor");
    fwd.push_back({[this] {
      check(cudnnActivationForward(ctx().cudnn, act_, &kOne, in().td, in().x(), &kZero, out().td, out().x()),
            "cudnnActivationForward");
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      bwd.push_back({[this, acc] {
        if (leaky_) {
          kernels::for_each(cstream(), in().numel(), kernels::LeakyReluBackward{spec_.alpha, acc}, in().dx(),
                            static_cast<const float*>(out().dx()), static_cast<const float*>(in().x()));
          return;
        }
        check(cudnnActivationBackward(ctx().cudnn, act_, &kOne, out().td, out().x(), out().td, out().dx(), in().td,
                                      in().x(), beta_for(acc), in().td, in().dx()),
              "cudnnActivationBackward");
      }});
    }
    plan_.grad_done(bwd, out());
  }

 private:
  bool leaky_ = false;
  ActDesc act_;
};

// Dropout's stream of draws is (step << 20) ^ layer, as on the CPU, and element i of
// the mask is element i of the NCHW value.
class DropoutLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    identity_ = !training() || spec_.p <= 0.f;
    if (identity_) {  // the input's memory, whatever it is at this step
      fwd.push_back({[this] { out().out = in().out; }});
      return;
    }
    out().out = plan_.alloc(Shape(out().desc.dims.begin(), out().desc.dims.end()));
    fwd.push_back({[this] {
      kernels::for_each(cstream(), out().numel(), kernels::DropoutForward{draws(), plan_.opt_.seed, spec_.p}, out().x(),
                        static_cast<const float*>(in().x()));
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      bwd.push_back({[this, acc] {
        if (identity_) {
          kernels::for_each(cstream(), in().numel(), kernels::CopyTo{acc}, in().dx(),
                            static_cast<const float*>(out().dx()));
          return;
        }
        kernels::for_each(cstream(), in().numel(), kernels::DropoutBackward{draws(), plan_.opt_.seed, spec_.p, acc},
                          in().dx(), static_cast<const float*>(out().dx()));
      }});
    }
    plan_.grad_done(bwd, out());
  }

 private:
  uint64_t draws() const { return (plan_.step_ << 20) ^ static_cast<uint64_t>(index_); }
  bool identity_ = false;
};

class AddLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    out().out = plan_.alloc(Shape(out().desc.dims.begin(), out().desc.dims.end()));
    fwd.push_back({[this] {
      const int64_t n = out().numel();
      kernels::for_each(cstream(), n, kernels::Sum2{}, out().x(), static_cast<const float*>(in(0).x()),
                        static_cast<const float*>(in(1).x()));
      for (size_t k = 2; k < spec_.inputs.size(); ++k)
        kernels::for_each(cstream(), n, kernels::CopyTo{true}, out().x(),
                          static_cast<const float*>(in(static_cast<int>(k)).x()));
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    for (size_t k = 0; k < spec_.inputs.size(); ++k) {
      DVal& v = in(static_cast<int>(k));
      if (!v.needs_grad) continue;
      const bool acc = plan_.grad_write(bwd, v);
      DVal* p = &v;
      bwd.push_back({[this, p, acc] {
        kernels::for_each(cstream(), p->numel(), kernels::CopyTo{acc}, p->dx(), static_cast<const float*>(out().dx()));
      }});
    }
    plan_.grad_done(bwd, out());
  }
};

}  // namespace

std::unique_ptr<CudaLayer> make_activation_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<ActLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_dropout_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<DropoutLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_add_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<AddLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda
