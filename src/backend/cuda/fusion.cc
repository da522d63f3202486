#include "backend/cuda/fusion.h"

#include <algorithm>

#include "backend/precision.h"

namespace cohort::backend::cuda {

Fusion plan_fusion(const NetSpec& spec, const PlanOptions& options) {
  const size_t n = spec.layers.size();
  Fusion f;
  f.bn_relu.assign(n, false);
  f.bn_add.assign(n, -1);
  f.folded.assign(n, -1);
  if (!options.training) return f;  // inference: one affine pass and a separate relu
  std::vector<int> consumers(n, 0);
  for (const LayerSpec& l : spec.layers)
    for (int src : l.inputs) consumers[static_cast<size_t>(src)]++;
  // Every layer of a fused group computes NHWC images (in the plan's type: batch norms,
  // adds and relus all compute in it).
  auto nhwc = [&](const LayerSpec& l) {
    return l.shape.size() == 3 &&
           (options.layout == Layout::kNHWC || compute_dtype(l, options.precision) != DType::kF32);
  };
  auto fusable_bn = [&](size_t i) {
    const LayerSpec& bn = spec.layers[i];
    return bn.kind == LayerKind::kBatchNorm && consumers[i] == 1 && nhwc(bn);
  };
  for (size_t j = 1; j < n; ++j) {
    const LayerSpec& relu = spec.layers[j];
    if (relu.kind != LayerKind::kActivation || relu.act != ActKind::kRelu || relu.inputs.size() != 1 || !nhwc(relu))
      continue;
    const size_t i = static_cast<size_t>(relu.inputs[0]);
    if (fusable_bn(i)) {  // relu(bn(x))
      f.bn_relu[i] = true;
      f.folded[j] = static_cast<int>(i);
      continue;
    }
    const LayerSpec& add = spec.layers[i];  // relu(bn(x) + z)?
    if (add.kind != LayerKind::kAdd || add.inputs.size() != 2 || consumers[i] != 1 || !nhwc(add)) continue;
    const int bn = std::max(add.inputs[0], add.inputs[1]), z = std::min(add.inputs[0], add.inputs[1]);
    if (bn == z || !fusable_bn(static_cast<size_t>(bn))) continue;
    f.bn_relu[static_cast<size_t>(bn)] = true;
    f.bn_add[static_cast<size_t>(bn)] = z;
    f.folded[i] = bn;
    f.folded[j] = static_cast<int>(i);
  }
  return f;
}

bool uses_bn_ex(CudaBatchNorm choice, bool fused, bool training, DType dtype, const Shape& shape) {
  const bool can = training && dtype == DType::kF16 && shape.size() == 3 && shape[0] % 4 == 0;
  switch (choice) {
    case CudaBatchNorm::kAuto:
      return can && fused;
    case CudaBatchNorm::kKernels:
      return false;
    case CudaBatchNorm::kCudnn:
      return can;
  }
  return false;
}

}  // namespace cohort::backend::cuda
