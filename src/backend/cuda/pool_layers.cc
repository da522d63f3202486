// Max, average (padding excluded) and global-average pooling: cuDNN where its
// symmetric padding places the windows as the network does, the kernels/pool.h
// functors where a ceil-mode output needs more padding at the bottom or right.
#include "backend/cuda/plan.h"
#include "kernels/for_each.h"
#include "kernels/pool.h"

namespace cohort::backend::cuda {
namespace {

class PoolLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    const auto& id = in().desc.dims;
    Window w = spec_.win;
    int64_t oh = out().desc.dims[2], ow = out().desc.dims[3];
    max_ = spec_.kind == LayerKind::kMaxPool;
    if (spec_.kind == LayerKind::kGlobalAvgPool) {
      w = Window{id[2], id[3], id[2], id[3], 0, 0, 1, 1, false};
      oh = ow = 1;
    }
    out().out = plan_.alloc(Shape(out().desc.dims.begin(), out().desc.dims.end()));
    geometry_ = {id[0], id[1], id[2], id[3], oh, ow, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw};
    cudnn_ = cudnn_pool_fits(w, id[2], id[3], oh, ow);
    if (cudnn_) {
      const cudnnPoolingMode_t mode =
          max_ ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
      check(cudnnSetPooling2dDescriptor(pool_, mode, CUDNN_NOT_PROPAGATE_NAN, w.kh, w.kw, w.ph, w.pw, w.sh, w.sw),
            "cudnnSetPooling2dDescriptor");
      fwd.push_back({[this] {
        check(cudnnPoolingForward(ctx().cudnn, pool_, &kOne, in().td, in().x(), &kZero, out().td, out().x()),
              "cudnnPoolingForward");
      }});
      return;
    }
    fwd.push_back({[this] {
      kernels::for_each(cstream(), out().numel(), kernels::PoolForward{geometry_, max_}, out().x(),
                        static_cast<const float*>(in().x()));
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      bwd.push_back({[this, acc] {
        if (cudnn_) {
          check(cudnnPoolingBackward(ctx().cudnn, pool_, &kOne, out().td, out().x(), out().td, out().dx(), in().td,
                                     in().x(), beta_for(acc), in().td, in().dx()),
                "cudnnPoolingBackward");
          return;
        }
        kernels::for_each(cstream(), in().numel(), kernels::PoolBackward{geometry_, max_, acc}, in().dx(),
                          static_cast<const float*>(out().dx()), static_cast<const float*>(in().x()),
                          static_cast<const float*>(out().x()));
      }});
    }
    plan_.grad_done(bwd, out());
  }

 private:
  bool max_ = false, cudnn_ = true;
  kernels::PoolGeometry geometry_{};
  PoolDesc pool_;
};

}  // namespace

std::unique_ptr<CudaLayer> make_pool_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<PoolLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda
