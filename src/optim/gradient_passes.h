// Backward passes accumulated into one update (backward_passes_per_step): which gradients
// the current pass has reported and their sums over the passes (on the gradients'
// device, summed on the compute stream). Shared by the exchanges that accumulate
// locally before they send: the distributed optimizer and a parameter-server worker.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/status.h"
#include "kernels/for_each.h"
#include "kernels/optim_update.h"
#include "optim/named_tensor.h"

namespace cohort {

class GradientPasses {
 public:
  // `params` names the gradients (borrowed tensors that outlive this object); `stream`
  // is the one backward writes them on.
  GradientPasses(std::vector<ParamGrad> params, int passes, const Stream& stream = {})
      : params_(std::move(params)), passes_(passes), stream_(stream) {
    require(passes_ >= 1, "backward_passes_per_step must be >= 1, got ", passes_);
    done_.assign(params_.size(), 0);
    if (passes_ > 1)
      for (const ParamGrad& p : params_) {
        sums_.push_back(Tensor::empty_like(p.grad, p.param.shape(), DType::kF32, stream_));
        zero(sums_.back(), stream_);
      }
  }

  // Parameter `index`'s gradient of this pass is final: with several passes it joins the
  // sum. True on the last pass, when what is to be sent (sum() or the gradient) is final.
  bool report(size_t index) {
    require(index < params_.size(), "gradient_ready: index ", index, " but the model has ", params_.size(),
            " parameters");
    require(!done_[index], "gradient_ready: parameter '", params_[index].name,
            "' was reported twice in one backward pass");
    done_[index] = 1;
    if (passes_ > 1) {
      const Tensor& g = params_[index].grad;
      kernels::for_each(stream_, g.numel(), kernels::AccumulateScaled{1.0f}, sums_[index].data_as<float>(),
                        static_cast<const float*>(g.data_as<float>()));
    }
    return pass_ == passes_ - 1;
  }

  // Ends a backward pass: `report_missing(index)` for every gradient it did not report
  // (every rank must send every tensor), then false on an accumulation pass, true on the
  // last one (the next pass starts a new update).
  template <typename F>
  bool end_pass(F&& report_missing) {
    for (size_t i = 0; i < params_.size(); ++i)
      if (!done_[i]) report_missing(i);
    std::fill(done_.begin(), done_.end(), 0);
    if (pass_ < passes_ - 1) {
      ++pass_;
      return false;
    }
    pass_ = 0;
    return true;
  }

  int pass() const { return pass_; }
  int passes() const { return passes_; }
  // The sum over the passes of parameter i's gradient (passes > 1).
  const Tensor& sum(size_t i) const { return sums_[i]; }
  // After the update: the sums start again from zero.
  void clear_sums() {
    for (Tensor& s : sums_) zero(s, stream_);
  }
  const Stream& stream() const { return stream_; }

 private:
  std::vector<ParamGrad> params_;
  int passes_;
  Stream stream_;
  int pass_ = 0;
  std::vector<char> done_;
  std::vector<Tensor> sums_;
};

}  // namespace cohort
