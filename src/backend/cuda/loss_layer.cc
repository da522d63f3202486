// The loss: softmax cross-entropy with label smoothing in f32 at every precision (the
// logits of a reduced-precision net are cast), one row per sample on the
// kernels/softmax_xent.h math the CPU backend runs, the rows' losses summed by
// kernels::reduce_into into a device scalar that loss() reads back.
#include "backend/cuda/plan.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"
#include "kernels/optim_update.h"

namespace cohort::backend::cuda {
namespace {

class SoftmaxXentLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    fwd.push_back(
        {[this] {
           plan_.loss_computed_ = plan_.labels_.defined() && plan_.labels_.numel() > 0;
           if (!plan_.loss_computed_) return;  // inference of the logits only
           zero(plan_.loss_sum_, cstream());
           const kernels::SoftmaxXentLoss f{in().cxs<float>(), plan_.labels_.data_as<int32_t>(), in().desc.dims[1],
                                            spec_.label_smoothing, plan_.bad_label_.data_as<int32_t>()};
           kernels::reduce_into(cstream(), in().desc.dims[0], f, kernels::Plus{}, plan_.loss_sum_.data_as<double>());
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
                     const kernels::SoftmaxXentRows f{in().cxs<float>(), plan_.labels_.data_as<int32_t>(),
                                                      in().desc.dims[1], spec_.label_smoothing,
                                                      in().dxs<float>(), plan_.loss_scale_ / static_cast<float>(n),
                                                      nullptr,           plan_.bad_label_.data_as<int32_t>()};
                     kernels::for_each(cstream(), n, f);
                   },
                   0, false, StepKind::kHost});  // the loss scale is the pass's
  }
};

}  // namespace

std::unique_ptr<CudaLayer> make_softmax_xent_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<SoftmaxXentLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda
