// The fusion pass of the CUDA plan (host code, built with or without CUDA): which
// relus the batch norm before them applies through cuDNN's fused batch norm
// (cudnnBatchNormalization{ForwardTraining,Backward}Ex with
// CUDNN_BATCHNORM_OPS_BN_ACTIVATION). cuDNN runs that fused form only for f16 NHWC
// values in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode with a channel count that is a
// multiple of 4, so a pair fuses where the precision makes both layers f16 (images
// are NHWC at reduced precision), the plan trains, and the relu is the batch norm's
// only consumer. A fused relu's value is its batch norm's (the same memory), and so is
// its gradient: reading either layer's value gives the relu's output.
#pragma once

#include <vector>

#include "backend/backend.h"

namespace cohort::backend::cuda {

struct Fusion {
  std::vector<bool> bn_relu;      // per layer: a batch norm that applies the relu after it
  std::vector<bool> folded_relu;  // per layer: a relu its batch norm applies
};

Fusion plan_fusion(const NetSpec& spec, const PlanOptions& options);

}  // namespace cohort::backend::cuda
