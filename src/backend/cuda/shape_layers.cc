// Layers that move data without arithmetic: the input, concat (block copies into the
// channel range of each input), flatten (an NCHW value read as [N, C·H·W], the CPU
// backend's feature order: its input is read in NCHW, a cast where the value is NHWC)
// and the ResNet option-A shortcut.
#include "backend/cuda/plan.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"

namespace cohort::backend::cuda {
namespace {

class InputLayer final : public CudaLayer {
 public:
  InputLayer(CudaPlan& plan, const LayerSpec& spec, int index) : CudaLayer(plan, spec, index) {
    nhwc_ = spec.shape.size() == 3 && plan.nhwc();  // the caller's batch, as given
  }
  void build_forward() override {}  // forward() points the value at the batch
};

// Rows of the concat: NCHW values are N rows of C_k·H·W elements, NHWC values N·H·W rows
// of C_k elements; input k starts at column offset(k) of the output's rows.
class ConcatLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    alloc_out();
    with_type(dtype(), [&]<typename S, typename C>() {
      fwd.push_back({[this] {
        int64_t off = 0;
        for (size_t k = 0; k < spec_.inputs.size(); ++k) {
          const DVal& v = in(static_cast<int>(k));
          const int64_t width = row_width(v);
          kernels::for_each(cstream(), v.numel(), kernels::CopyRows<S, C>{width, row_width(out()), width, false},
                            out().xs<S>() + off, v.cxs<S>());
          off += width;
        }
      }});
    });
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    int64_t off = 0;
    for (size_t k = 0; k < spec_.inputs.size(); ++k) {
      DVal& v = in(static_cast<int>(k));
      const int64_t width = row_width(v);
      if (v.needs_grad) {
        const bool acc = plan_.grad_write(bwd, v);
        with_type(dtype(), [&]<typename S, typename C>() {
          bwd.push_back({[this, p = &v, width, off, acc] {
            kernels::for_each(cstream(), p->numel(), kernels::CopyRows<S, C>{width, width, row_width(out()), acc},
                              p->dxs<S>(), out().cdxs<S>() + off);
          }});
        });
      }
      off += width;
    }
    plan_.grad_done(bwd, out());
  }

 private:
  static int64_t row_width(const DVal& v) {
    const auto& d = v.desc.dims;
    return v.nhwc ? d[1] : static_cast<int64_t>(d[1]) * d[2] * d[3];
  }
};

class FlattenLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    // A view, made on the host; with graphs of memory the same every pass (a replay needs
    // the step no more).
    fwd.push_back({[this] {
      const int64_t n = out().desc.dims[0], f = out().desc.dims[1];
      out().out = Tensor::wrap(in().out.data(), {n, f}, dtype(), in().out.device());
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      with_type(dtype(), [&]<typename S, typename C>() {
        bwd.push_back({[this, acc] {
          kernels::for_each(cstream(), in().numel(), kernels::CopyTo<S, C>{acc}, in().dxs<S>(), out().cdxs<S>());
        }});
      });
    }
    plan_.grad_done(bwd, out());
  }
};

class ShortcutALayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    alloc_out();
    const auto& i = in().desc.dims;
    const auto& o = out().desc.dims;
    geometry_ = {i[1], i[2], i[3], o[1], o[2], o[3], spec_.win.sh, (o[1] - i[1]) / 2, nhwc()};
    with_type(dtype(), [&]<typename S, typename C>() {
      fwd.push_back({[this] {
        kernels::for_each(cstream(), out().numel(), kernels::ShortcutAForward<S, C>{geometry_}, out().xs<S>(),
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
          kernels::for_each(cstream(), in().numel(), kernels::ShortcutABackward<S, C>{geometry_, acc}, in().dxs<S>(),
                            out().cdxs<S>());
        }});
      });
    }
    plan_.grad_done(bwd, out());
  }

 private:
  kernels::ShortcutGeometry geometry_{};
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
