// The loss: softmax cross-entropy with label smoothing (kernels/softmax_xent.h).
#include "backend/cpu/plan.h"

#include <cmath>

#include "kernels/softmax_xent.h"

namespace cohort::backend::cpu {
namespace {

// Softmax and the loss are f32 at every precision (backend/precision.h).
class SoftmaxXentLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    logits_ = plan_.take(fwd, in().mem, plain_md(in().shape, dt_));
    fwd.push_back({{}, {}, [this] { compute(nullptr); }});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    Items post;
    memory ds = plan_.diff_target(post, in(), plain_md(in().shape, dt_));
    bwd.push_back({{}, {}, [this, ds] { compute(static_cast<float*>(ds.get_data_handle())); }});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  void compute(float* grad) {
    if (!plan_.labels_ && !grad) {  // inference of the logits only
      plan_.loss_ = std::nanf("");
      return;
    }
    require(plan_.labels_ != nullptr, "layer '", spec_.name, "': the loss needs labels");
    const int64_t n = in().shape[0], k = in().shape[1];
    const float* x = static_cast<const float*>(logits_.get_data_handle());
    const float grad_scale = plan_.loss_scale_ / static_cast<float>(n);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = plan_.labels_[i];
      require(label >= 0 && label < k, "label ", label, " of sample ", i, " is outside [0, ", k, ")");
      total += kernels::softmax_xent_row(x + i * k, k, label, spec_.label_smoothing, grad ? grad + i * k : nullptr,
                                         grad_scale);
    }
    plan_.loss_ = static_cast<float>(total / static_cast<double>(n));
  }
  memory logits_;
};

}  // namespace

std::unique_ptr<CpuLayer> make_softmax_xent_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<SoftmaxXentLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cpu
