// Layers that move data without arithmetic: the input, concat (block copies into the
// channel range of each input), flatten (the NCHW value read as [N, C·H·W]: no copy
// forward) and the ResNet option-A shortcut.
#include "backend/cuda/plan.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"

namespace cohort::backend::cuda {
namespace {

class InputLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;
  void build_forward() override {}  // forward() points the value at the batch
};

class ConcatLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    out().out = plan_.alloc(Shape(out().desc.dims.begin(), out().desc.dims.end()));
    fwd.push_back({[this] {
      const auto& od = out().desc.dims;
      const int64_t hw = static_cast<int64_t>(od[2]) * od[3], pitch = od[1] * hw;
      int64_t off = 0;
      for (size_t k = 0; k < spec_.inputs.size(); ++k) {
        DVal& v = in(static_cast<int>(k));
        const int64_t width = v.desc.dims[1] * hw;
        kernels::for_each(cstream(), v.numel(), kernels::CopyRows{width, pitch, width, false}, out().x() + off,
                          static_cast<const float*>(v.x()));
        off += width;
      }
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    const auto& od = out().desc.dims;
    const int64_t hw = static_cast<int64_t>(od[2]) * od[3], pitch = od[1] * hw;
    int64_t off = 0;
    for (size_t k = 0; k < spec_.inputs.size(); ++k) {
      DVal& v = in(static_cast<int>(k));
      const int64_t width = v.desc.dims[1] * hw;
      if (v.needs_grad) {
        const bool acc = plan_.grad_write(bwd, v);
        DVal* p = &v;
        bwd.push_back({[this, p, width, pitch, off, acc] {
          kernels::for_each(cstream(), p->numel(), kernels::CopyRows{width, width, pitch, acc}, p->dx(),
                            static_cast<const float*>(out().dx() + off));
        }});
      }
      off += width;
    }
    plan_.grad_done(bwd, out());
  }
};

class FlattenLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    fwd.push_back({[this] {
      const int64_t n = out().desc.dims[0], f = out().desc.dims[1];
      out().out = Tensor::wrap(in().out.data(), {n, f}, DType::kF32, in().out.device());
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      bwd.push_back({[this, acc] {
        kernels::for_each(cstream(), in().numel(), kernels::CopyTo{acc}, in().dx(),
                          static_cast<const float*>(out().dx()));
      }});
    }
    plan_.grad_done(bwd, out());
  }
};

class ShortcutALayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    out().out = plan_.alloc(Shape(out().desc.dims.begin(), out().desc.dims.end()));
    const auto& i = in().desc.dims;
    const auto& o = out().desc.dims;
    fwd_ = {i[1], i[2], i[3], o[1], o[2], o[3], spec_.win.sh, (o[1] - i[1]) / 2};
    fwd.push_back({[this] {
      kernels::for_each(cstream(), out().numel(), fwd_, out().x(), static_cast<const float*>(in().x()));
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      const kernels::ShortcutABackward f{fwd_.ci, fwd_.hi,     fwd_.wi,  fwd_.co, fwd_.ho,
                                         fwd_.wo, fwd_.stride, fwd_.pad, acc};
      bwd.push_back({[this, f] {
        kernels::for_each(cstream(), in().numel(), f, in().dx(), static_cast<const float*>(out().dx()));
      }});
    }
    plan_.grad_done(bwd, out());
  }

 private:
  kernels::ShortcutAForward fwd_{};
};

}  // namespace

std::unique_ptr<CudaLayer> make_input_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<InputLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_concat_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<ConcatLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_flatten_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<FlattenLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_shortcut_a_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<ShortcutALayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda
