// The loss: softmax cross-entropy with label smoothing in f32 at every precision (the
// logits of a reduced-precision net are cast), one warp per sample on the
// kernels/softmax_xent.h terms the CPU backend runs (kernels::SoftmaxXentLanes), the
// rows' losses summed in a fixed order into a device scalar that loss() reads back.
#include "backend/cuda/plan.h"
#include "kernels/layer_ops.h"

namespace cohort::backend::cuda {
namespace {

class SoftmaxXentLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    fwd.push_back({[this] {
                     plan_.loss_computed_ = plan_.labels_.defined() && plan_.labels_.numel() > 0;
                     if (!plan_.loss_computed_) return;  // inference of the logits only
                     kernels::cuda::launch_softmax_xent_loss(cstream().native(), in().desc.dims[0], lanes(nullptr, 0.f),
                                                             plan_.loss_sum_.data_as<double>());
                   },
                   0, false, StepKind::kHost});  // whether there are labels is the pass's
  }

  void build_backward() override {
    if (!in().needs_grad) return;
    plan_.grad_write(bwd, in());  // the first and only writer: the loss is the logits' one consumer
    bwd.push_back({[this] {
                     require(plan_.labels_.defined() && plan_.labels_.numel() > 0, "layer '", spec_.name,
                             "': backward needs the labels of the forward");
                     const int64_t n = in().desc.dims[0];
                     kernels::cuda::launch_softmax_xent_grad(
                         cstream().native(), n, lanes(in().dxs<float>(), plan_.loss_scale_ / static_cast<float>(n)));
                   },
                   0, false, StepKind::kHost});  // the loss scale is the pass's
  }

 private:
  kernels::SoftmaxXentLanes lanes(float* grad, float grad_scale) {
    return {in().cxs<float>(), plan_.labels_.data_as<int32_t>(),   in().desc.dims[1], spec_.label_smoothing, grad,
            grad_scale,        plan_.bad_label_.data_as<int32_t>()};
  }
};

}  // namespace

std::unique_ptr<CudaLayer> make_softmax_xent_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<SoftmaxXentLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda
