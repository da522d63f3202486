#include "backend/cuda/fusion.h"

#include "backend/precision.h"

namespace cohort::backend::cuda {

Fusion plan_fusion(const NetSpec& spec, const PlanOptions& options) {
  const size_t n = spec.layers.size();
  Fusion f;
  f.bn_relu.assign(n, false);
  f.folded_relu.assign(n, false);
  if (!options.training) return f;  // inference normalizes with cuDNN's plain call
  std::vector<int> consumers(n, 0);
  for (const LayerSpec& l : spec.layers)
    for (int src : l.inputs) consumers[static_cast<size_t>(src)]++;
  for (size_t j = 1; j < n; ++j) {
    const LayerSpec& relu = spec.layers[j];
    if (relu.kind != LayerKind::kActivation || relu.act != ActKind::kRelu || relu.inputs.size() != 1) continue;
    const size_t i = static_cast<size_t>(relu.inputs[0]);
    const LayerSpec& bn = spec.layers[i];
    if (bn.kind != LayerKind::kBatchNorm || consumers[i] != 1 || bn.shape.size() != 3 || bn.shape[0] % 4 != 0) continue;
    if (compute_dtype(bn, options.precision) != DType::kF16 || compute_dtype(relu, options.precision) != DType::kF16)
      continue;
    f.bn_relu[i] = true;
    f.folded_relu[j] = true;
  }
  return f;
}

}  // namespace cohort::backend::cuda
