// Batch norm (per channel over N, H, W, or per feature over N for [N, F] values; scale,
// shift and statistics in f32; the running statistics follow momentum with the unbiased
// variance, as the CPU backend's do): NHWC images through kernels/batch_norm.h in their
// own type (f32, f16 or bf16), since cuDNN's batch norm is 50–100 times slower than
// memory there, with the relu after it (or the add and the relu) folded in where
// backend/cuda/fusion.h pairs them; f16 ones so paired whose channels are a multiple of 4
// through cuDNN's fused BN-Ex form instead (the option cuda_batch_norm may send every f16
// one there, or none); NCHW images and [N, F] values through cuDNN's
// spatial batch norm, in f32 or f16 (bf16 between casts)) and LRN across channels
// (cuDNN, in f32 NCHW at every precision: its value is cast around it; alpha is divided
// by the window size, as oneDNN and PyTorch do).
#include "backend/cuda/plan.h"
#include "kernels/batch_norm.h"
#include "kernels/for_each.h"

namespace cohort::backend::cuda {
namespace {

class BatchNormLayer final : public CudaLayer {
 public:
  // An NHWC image normalizes through kernels/batch_norm.h in the plan's type. Otherwise
  // cuDNN's batch norm runs: it takes f16 values beside f32 parameters, but bf16 values
  // it does not document, so a bf16 [N, F] value normalizes in f32 between casts. A
  // batch norm the fusion pass pairs with the relu after it (backend/cuda/fusion.h)
  // applies that relu, and the add before it where there is one: in f16 with channels
  // in multiples of 4 through cuDNN's fused form (faster there than kernels/ own), unless
  // the option cuda_batch_norm says otherwise (uses_bn_ex).
  BatchNormLayer(CudaPlan& plan, const LayerSpec& spec, int index)
      : CudaLayer(plan, spec, index),
        fused_(plan.fusion_.bn_relu.at(static_cast<size_t>(index))),
        add_(plan.fusion_.bn_add.at(static_cast<size_t>(index))),
        cudnn_fused_(uses_bn_ex(plan.ctx_.batch_norm, fused_, plan.opt_.training, dt_, spec.shape)),
        own_(nhwc_ && !cudnn_fused_) {
    if (dt_ == DType::kBF16 && !own_) dt_ = DType::kF32;
  }

  void build_forward() override {
    // (kernels/batch_norm.h takes any eps the graph accepts; cuDNN has a floor)
    require(own_ || spec_.eps >= CUDNN_BN_MIN_EPSILON, "layer '", spec_.name,
            "': cuDNN's batch norm needs eps >= ", CUDNN_BN_MIN_EPSILON, ", got ", spec_.eps);
    alloc_out();
    const int64_t c = out().desc.dims[1];
    const int64_t per_channel = out().numel() / std::max<int64_t>(c, 1);
    // cuDNN's unbiased running variance divides by N·H·W − 1.
    require(!training() || per_channel > 1, "layer '", spec_.name, "': a batch norm in training on the GPU needs ",
            "more than one value per channel, got N·H·W = ", per_channel, " (use a batch of 2 or more per rank)");
    // Scale, shift, running and saved statistics: f32 [1, C, 1, 1] whatever the values'
    // type (cudnnDeriveBNTensorDescriptor would give f64 values f64 parameters).
    const int ci = static_cast<int>(c);
    bn_ = tensor_desc(Desc4{{1, ci, 1, 1}, {ci, 1, 1, 1}}, DType::kF32);
    if (own_) {
      build_own_forward(c);
      return;
    }
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
    if (cudnn_fused_) {
      build_fused_forward();
      return;
    }
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
    if (own_) {
      build_own_backward();
      return;
    }
    // cuDNN computes the input's gradient with the parameters' whatever is asked: a
    // batch norm of the input itself writes it into scratch memory.
    const bool wanted = in().needs_grad;
    const bool acc = wanted && plan_.grad_write(bwd, in());
    // z's gradient (relu(bn(x) + z)): cuDNN writes it, with no blending, so one that
    // adds to another writer's goes through scratch memory.
    const bool z_wanted = z_ && z_->needs_grad;
    const bool z_acc = z_wanted && plan_.grad_write(bwd, *z_);
    bwd.push_back({[this, wanted, acc, z_wanted, z_acc] {
      // Scratch memory is kept once made (a graph's replay reuses the pointers it saw).
      auto scratch = [&](Tensor& t, const DVal& like) {
        if (!t.defined() || t.data() == nullptr) t = plan_.alloc(like.dims(), like.dtype);
        return t.data();
      };
      void* dx = wanted ? in().dx() : scratch(dx_scratch_, in());
      if (cudnn_fused_) {
        // With a folded relu, dy is the relu's output gradient and y the relu's output:
        // cuDNN masks dy itself.
        // cuDNN documents blending only for dx, not whether the fused kernels blend dz
        // alike: both are written without blending, and one that adds to another
        // writer's goes through scratch memory.
        void* dz = nullptr;
        if (z_) dz = z_wanted && !z_acc ? z_->dx() : scratch(dz_scratch_, *z_);
        void* fused_dx = acc ? scratch(dx_scratch_, in()) : dx;
        // y only where the relu's gradient is taken from it.
        check(cudnnBatchNormalizationBackwardEx(
                  ctx().cudnn, kFusedMode, ops(), &kOne, &kZero, &kOne, &kZero, in().td, in().x(),
                  fused_ ? out().td.get() : nullptr, fused_ ? out().x() : nullptr, out().td, out().dx(),
                  z_ ? z_->td.get() : nullptr, dz, in().td, fused_dx, bn_, plan_.param(spec_.params[0]),
                  plan_.param(spec_.params[1]), plan_.grad(spec_.params[0]), plan_.grad(spec_.params[1]), spec_.eps,
                  saved_mean_.data_as<float>(), saved_inv_var_.data_as<float>(), act(), plan_.workspace(),
                  plan_.workspace_bytes(), reserve_.data(), reserve_.nbytes()),
              "cudnnBatchNormalizationBackwardEx");
        if (acc)
          kernels::for_each(cstream(), in().numel(), kernels::CopyTo<uint16_t, kernels::F16Codec>{true},
                            in().dxs<uint16_t>(), static_cast<const uint16_t*>(dx_scratch_.data()));
        if (z_acc)
          kernels::for_each(cstream(), z_->numel(), kernels::CopyTo<uint16_t, kernels::F16Codec>{true},
                            z_->dxs<uint16_t>(), static_cast<const uint16_t*>(dz_scratch_.data()));
        return;
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
  // cuDNN's BN-Ex: f16 NHWC, persistent spatial mode, with the relu (and the add) that
  // fusion.h folds in, or alone.
  static constexpr cudnnBatchNormMode_t kFusedMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  cudnnBatchNormOps_t ops() const {
    return z_       ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
           : fused_ ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION
                    : CUDNN_BATCHNORM_OPS_BN;
  }
  // The relu's descriptor where one folds in; none for the batch norm alone.
  cudnnActivationDescriptor_t act() const { return fused_ ? relu_.get() : nullptr; }

  void build_fused_forward() {
    // z as the add reads it: f16 NHWC, computed before this layer (fusion.h).
    if (add_ >= 0) z_ = &plan_.as(plan_.vals_.at(static_cast<size_t>(add_)), DType::kF16, true, fwd);
    const cudnnTensorDescriptor_t z_td = z_ ? z_->td.get() : nullptr;
    // NaN stays NaN, as in the unfused relu (and the loss scaler's overflow check sees it).
    if (fused_)
      check(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
            "cudnnSetActivationDescriptor");
    size_t fwd_bytes = 0, bwd_bytes = 0, reserve_bytes = 0;
    check(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(ctx().cudnn, kFusedMode, ops(), in().td, z_td,
                                                                   out().td, bn_, act(), &fwd_bytes),
          "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
    // The same descriptors as the call: y only where a relu folds in.
    check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(ctx().cudnn, kFusedMode, ops(), in().td,
                                                            fused_ ? out().td.get() : nullptr, out().td, z_td, in().td,
                                                            bn_, act(), &bwd_bytes),
          "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
    check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(ctx().cudnn, kFusedMode, ops(), act(), in().td,
                                                               &reserve_bytes),
          "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
    // Never a null workspace: the Ex calls given none may fall back to the unfused form.
    plan_.need_workspace(std::max({fwd_bytes, bwd_bytes, size_t{1}}));
    reserve_ = plan_.alloc({static_cast<int64_t>(std::max<size_t>(reserve_bytes, 1))}, DType::kU8);
    fwd.push_back({[this] {
      check(cudnnBatchNormalizationForwardTrainingEx(
                ctx().cudnn, kFusedMode, ops(), &kOne, &kZero, in().td, in().x(), z_ ? z_->td.get() : nullptr,
                z_ ? z_->x() : nullptr, out().td, out().x(), bn_, plan_.param(spec_.params[0]),
                plan_.param(spec_.params[1]), spec_.momentum, plan_.state(spec_.states[0]),
                plan_.state(spec_.states[1]), spec_.eps, saved_mean_.data_as<float>(), saved_inv_var_.data_as<float>(),
                act(), plan_.workspace(), plan_.workspace_bytes(), reserve_.data(), reserve_.nbytes()),
            "cudnnBatchNormalizationForwardTrainingEx");
    }});
  }

  // kernels/batch_norm.h on an NHWC value of `c` channels: the batch's statistics, then
  // one affine pass (in inference, the running statistics' affine pass), which adds z
  // and applies the relu where they are folded in.
  void build_own_forward(int64_t c) {
    // z as the add reads it: the plan's type, NHWC, computed before this layer (fusion.h)
    if (add_ >= 0) z_ = &plan_.as(plan_.vals_.at(static_cast<size_t>(add_)), dtype(), true, fwd);
    coef_ = plan_.alloc({4 * c});  // 3C in the forward pass, 4C in the backward one
    if (training()) {
      saved_mean_ = plan_.alloc({c});
      saved_inv_var_ = plan_.alloc({c});
      sums_ = plan_.alloc({2 * c}, DType::kF64);
      tickets_ = plan_.alloc({1}, DType::kI32);
      zero(sums_, cstream());     // once: each finalize leaves them at zero for the next pass,
      zero(tickets_, cstream());  // and the statistics kernel its ticket count
    }
    with_type(dtype(), [&]<typename S, typename C>() {
      fwd.push_back({[this, c] {
        const float* coef = coef_.data_as<float>();
        if (training()) {
          const int64_t rows = in().numel() / c;
          kernels::bn_forward_statistics<S, C>(
              cstream(),
              {sums_.data_as<double>(), in().cxs<S>(), plan_.param(spec_.params[0]), plan_.param(spec_.params[1]),
               plan_.state(spec_.states[0]), plan_.state(spec_.states[1]), saved_mean_.data_as<float>(),
               saved_inv_var_.data_as<float>(), coef_.data_as<float>(), rows, c, spec_.eps, spec_.momentum},
              tickets());
        } else {
          kernels::for_each(cstream(), c,
                            kernels::BnInferenceFinalize{plan_.param(spec_.params[0]), plan_.param(spec_.params[1]),
                                                         plan_.state(spec_.states[0]), plan_.state(spec_.states[1]),
                                                         coef_.data_as<float>(), c, spec_.eps});
        }
        kernels::bn_affine<S, C>(cstream(), out().numel(), c, fused_, out().xs<S>(), in().cxs<S>(), coef,
                                 z_ ? z_->cxs<S>() : nullptr);
      }});
    });
  }

  // The parameters' gradients (written) and, where the input and a folded add's z want
  // theirs, those (written, or added to another consumer's). A folded relu's gradient is
  // taken from its output, this layer's value.
  void build_own_backward() {
    const bool wanted = in().needs_grad;
    const bool acc = wanted && plan_.grad_write(bwd, in());
    const bool z_wanted = z_ && z_->needs_grad;
    const bool z_acc = z_wanted && plan_.grad_write(bwd, *z_);
    with_type(dtype(), [&]<typename S, typename C>() {
      bwd.push_back({[this, wanted, acc, z_wanted, z_acc] {
        const int64_t c = out().desc.dims[1], rows = in().numel() / c;
        const float* mean = saved_mean_.data_as<float>();
        const S* y = fused_ ? out().cxs<S>() : nullptr;
        kernels::bn_backward_statistics<S, C>(
            cstream(), in().cxs<S>(), out().cdxs<S>(), y,
            {sums_.data_as<double>(), plan_.param(spec_.params[0]), mean, saved_inv_var_.data_as<float>(),
             plan_.grad(spec_.params[0]), plan_.grad(spec_.params[1]), coef_.data_as<float>(), rows, c},
            tickets());
        S* dx = wanted ? in().dxs<S>() : nullptr;
        S* dz = z_wanted ? z_->dxs<S>() : nullptr;
        if (dx || dz)
          kernels::bn_backward_data<S, C>(cstream(), in().numel(), {c, acc, z_acc}, dx, out().cdxs<S>(), in().cxs<S>(),
                                          coef_.data_as<float>(), y, dz);
      }});
    });
    plan_.ready(bwd, spec_.params);
    plan_.grad_done(bwd, out());
  }

  bool fused_;         // applies the relu after it (and the add before that, with add_)
  int add_;            // the layer whose value the fused form adds before its relu, or -1
  bool cudnn_fused_;   // through cuDNN's BN-Ex form (with the relu and add, or alone)
  bool own_;           // an NHWC value outside that: kernels/batch_norm.h rather than cuDNN
  DVal* z_ = nullptr;  // that value as it is read (in this layer's type, NHWC)
  TensorDesc bn_;
  ActDesc relu_;
  Tensor saved_mean_, saved_inv_var_, reserve_;
  Tensor sums_, coef_;  // kernels/batch_norm.h's per-channel sums (f64) and coefficients
  Tensor tickets_;      // u32: the statistics kernel's count of finished blocks
  uint32_t* tickets() const { return reinterpret_cast<uint32_t*>(tickets_.data_as<int32_t>()); }
  Tensor dx_scratch_, dz_scratch_;  // the input's and z's gradients where they are not wanted as such
};

class LrnLayer final : public CudaLayer {
 public:
  LrnLayer(CudaPlan& plan, const LayerSpec& spec, int index) : CudaLayer(plan, spec, index) {
    dt_ = DType::kF32;
    nhwc_ = false;
  }

  void build_forward() override {
    require(spec_.lrn_size >= CUDNN_LRN_MIN_N && spec_.lrn_size <= CUDNN_LRN_MAX_N, "layer '", spec_.name,
            "': cuDNN's LRN takes sizes ", CUDNN_LRN_MIN_N, " to ", CUDNN_LRN_MAX_N, ", got ", spec_.lrn_size);
    require(spec_.lrn_k >= CUDNN_LRN_MIN_K, "layer '", spec_.name, "': cuDNN's LRN needs k >= ", CUDNN_LRN_MIN_K,
            ", got ", spec_.lrn_k);
    require(spec_.lrn_beta >= CUDNN_LRN_MIN_BETA, "layer '", spec_.name,
            "': cuDNN's LRN needs beta >= ", CUDNN_LRN_MIN_BETA, ", got ", spec_.lrn_beta);
    check(cudnnSetLRNDescriptor(lrn_, static_cast<unsigned>(spec_.lrn_size), spec_.lrn_alpha, spec_.lrn_beta,
                                spec_.lrn_k),
          "cudnnSetLRNDescriptor");
    alloc_out();
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
