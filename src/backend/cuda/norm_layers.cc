// Batch norm (cuDNN's spatial batch norm: per channel over N, H, W, or per feature over
// N for [N, F] values; the running statistics follow momentum with the unbiased
// variance, as the CPU backend's do) and LRN across channels (cuDNN; alpha is divided
// by the window size, as oneDNN and PyTorch do).
#include "backend/cuda/plan.h"

namespace cohort::backend::cuda {
namespace {

class BatchNormLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    require(spec_.eps >= CUDNN_BN_MIN_EPSILON, "layer '", spec_.name, "': cuDNN needs eps >= ", CUDNN_BN_MIN_EPSILON);
    check(cudnnDeriveBNTensorDescriptor(bn_, in().td, CUDNN_BATCHNORM_SPATIAL), "cudnnDeriveBNTensorDescriptor");
    out().out = plan_.alloc(Shape(out().desc.dims.begin(), out().desc.dims.end()));
    const int64_t c = out().desc.dims[1];
    if (!training()) {
      fwd.push_back({[this] {
        check(cudnnBatchNormalizationForwardInference(ctx().cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, in().td,
                                                      in().x(), out().td, out().x(), bn_, plan_.param(spec_.params[0]),
                                                      plan_.param(spec_.params[1]), plan_.state(spec_.states[0]),
                                                      plan_.state(spec_.states[1]), spec_.eps),
              "cudnnBatchNormalizationForwardInference");
      }});
      return;
    }
    saved_mean_ = plan_.alloc({c});
    saved_inv_var_ = plan_.alloc({c});
    fwd.push_back({[this] {
      check(
          cudnnBatchNormalizationForwardTraining(
              ctx().cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, in().td, in().x(), out().td, out().x(), bn_,
              plan_.param(spec_.params[0]), plan_.param(spec_.params[1]), spec_.momentum, plan_.state(spec_.states[0]),
              plan_.state(spec_.states[1]), spec_.eps, saved_mean_.data_as<float>(), saved_inv_var_.data_as<float>()),
          "cudnnBatchNormalizationForwardTraining");
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    // cuDNN computes the input's gradient with the parameters' whatever is asked: a
    // batch norm of the input itself writes it into scratch memory.
    const bool wanted = in().needs_grad;
    const bool acc = wanted && plan_.grad_write(bwd, in());
    bwd.push_back({[this, wanted, acc] {
      Tensor scratch;
      float* dx = nullptr;
      if (wanted) {
        dx = in().dx();
      } else {
        scratch = plan_.alloc(Shape(in().desc.dims.begin(), in().desc.dims.end()));
        dx = scratch.data_as<float>();
      }
      check(cudnnBatchNormalizationBackward(
                ctx().cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, beta_for(acc), &kOne, &kZero, in().td, in().x(), out().td,
                out().dx(), in().td, dx, bn_, plan_.param(spec_.params[0]), plan_.grad(spec_.params[0]),
                plan_.grad(spec_.params[1]), spec_.eps, saved_mean_.data_as<float>(), saved_inv_var_.data_as<float>()),
            "cudnnBatchNormalizationBackward");
    }});
    plan_.ready(bwd, spec_.params);
    plan_.grad_done(bwd, out());
  }

 private:
  TensorDesc bn_;
  Tensor saved_mean_, saved_inv_var_;
};

class LrnLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  void build_forward() override {
    require(spec_.lrn_size >= CUDNN_LRN_MIN_N && spec_.lrn_size <= CUDNN_LRN_MAX_N, "layer '", spec_.name,
            "': cuDNN's LRN takes sizes ", CUDNN_LRN_MIN_N, " to ", CUDNN_LRN_MAX_N, ", got ", spec_.lrn_size);
    check(cudnnSetLRNDescriptor(lrn_, static_cast<unsigned>(spec_.lrn_size), spec_.lrn_alpha, spec_.lrn_beta,
                                spec_.lrn_k),
          "cudnnSetLRNDescriptor");
    out().out = plan_.alloc(Shape(out().desc.dims.begin(), out().desc.dims.end()));
    fwd.push_back({[this] {
      check(cudnnLRNCrossChannelForward(ctx().cudnn, lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne, in().td, in().x(),
                                        &kZero, out().td, out().x()),
            "cudnnLRNCrossChannelForward");
    }});
  }

  void build_backward() override {
    plan_.grad_read(bwd, out());
    if (in().needs_grad) {
      const bool acc = plan_.grad_write(bwd, in());
      bwd.push_back({[this, acc] {
        check(cudnnLRNCrossChannelBackward(ctx().cudnn, lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne, out().td, out().x(),
                                           out().td, out().dx(), in().td, in().x(), beta_for(acc), in().td, in().dx()),
              "cudnnLRNCrossChannelBackward");
      }});
    }
    plan_.grad_done(bwd, out());
  }

 private:
  LrnDesc lrn_;
};

}  // namespace

std::unique_ptr<CudaLayer> make_batch_norm_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<BatchNormLayer>(plan, spec, index);
}
std::unique_ptr<CudaLayer> make_lrn_layer(CudaPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<LrnLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cuda
