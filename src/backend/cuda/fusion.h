// The fusion pass of the CUDA plan (host code, built with or without CUDA): which
// relus (and which adds before them) the batch norm before them applies, for relu(bn(x))
// and relu(bn(x) + z), a residual block's end. Layers fuse where they compute NHWC
// images (the plan's layout, or any reduced precision), the plan trains, and each value
// but the relu's has the next fused layer as its only consumer. The batch norm then runs
// kernels/batch_norm.h's fused form, or in f16 with channels in multiples of 4 cuDNN's
// (cudnnBatchNormalization{ForwardTraining,Backward}Ex in
// CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode, with CUDNN_BATCHNORM_OPS_BN_ACTIVATION or
// CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION; uses_bn_ex decides, and with
// cuda_batch_norm=cudnn an unfused f16 batch norm goes there too, with
// CUDNN_BATCHNORM_OPS_BN). For relu(add(bn, z)) the batch norm is the add's later
// input, so that z is computed before it runs (a downsampling block's own
// batch norm fuses, with the main branch as z). A fused layer's value is its batch
// norm's (the same memory), and so is its gradient: reading the batch norm's, the
// add's or the relu's value gives the relu's output.
#pragma once

#include <vector>

#include "backend/backend.h"

namespace cohort::backend::cuda {

struct Fusion {
  std::vector<bool> bn_relu;  // per layer: a batch norm that applies the relu after it
  std::vector<int> bn_add;    // per such batch norm: the layer whose value it adds before the relu, or -1
  std::vector<int> folded;    // per layer: for a relu or add its batch norm applies, the layer it reads that
                              // holds its value (the batch norm or the folded add), else -1
};

Fusion plan_fusion(const NetSpec& spec, const PlanOptions& options);

// Whether a batch norm of an NHWC value runs through cuDNN's BN-Ex form rather than
// kernels/batch_norm.h (f16 images in training with channels a multiple of 4 only): with
// `choice` auto where a relu folds into it (`fused`), kernels never, cudnn always.
// `shape` is the value's per-sample shape ({C, H, W} for images).
bool uses_bn_ex(CudaBatchNorm choice, bool fused, bool training, DType dtype, const Shape& shape);

}  // namespace cohort::backend::cuda
