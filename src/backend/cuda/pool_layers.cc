// Max, average (padding excluded) and global-average pooling on the kernels/pool.h
// functors (packed for NHWC values with whole 16-byte packs of channels), in either
// layout and any type: the same windows as the network's (ceil mode with more padding
// at the bottom or right included), max pooling's gradient to the first maximum of
// each window, as on the CPU.
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
    alloc_out();
    if (max_) argmax_ = plan_.alloc(out().dims(), DType::kI32);
    geometry_ = {id[0], id[1], id[2], id[3], oh, ow, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, nhwc()};
    with_type(dtype(), [&]<typename S, typename C>() {
      fwd.push_back({[this] {
        kernels::pool_forward<S, C>(cstream(), geometry_, max_, out().xs<S>(), in().cxs<S>(),
                                    argmax_.data_as<int32_t>());
      }});
    });
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      with_type(dtype(), [&]<typename S, typename C>() {
        bwd.push_back({[this, acc] {
          kernels::pool_backward<S, C>(cstream(), geometry_, max_, acc, in().dxs<S>(), out().cdxs<S>(),
                                       static_cast<const int32_t*>(argmax_.data_as<int32_t>()));
        }});
      });
    }
    plan_.grad_done(bwd, out());
  }

 private:
  bool max_ = false;
  kernels::PoolGeometry geometry_{};
  Tensor argmax_;  // i32, per output of a max pooling: its window's first maximum
};

}  // namespace

std::unique_ptr<CudaLayer> make_pool_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<PoolLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda
