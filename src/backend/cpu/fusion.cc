// The fusion pass of the CPU plan: which relus their producers apply, which may run in
// place over their input, and which max poolings may apply the gradient of the relu
// before them.
#include "backend/cpu/plan.h"

namespace cohort::backend::cpu {
namespace {

// Whether layer i may overwrite its input: it is a relu, its input has one consumer,
// and the input's producer does not read its own output in backward.
bool relu_in_place(const NetSpec& spec, const std::vector<int>& consumers, size_t i) {
  const LayerSpec& l = spec.layers[i];
  if (l.kind != LayerKind::kActivation || (l.act != ActKind::kRelu && l.act != ActKind::kLeakyRelu)) return false;
  if (l.act == ActKind::kLeakyRelu && l.alpha < 0) return false;
  const int src = l.inputs[0];
  if (consumers[static_cast<size_t>(src)] != 1) return false;
  const LayerKind pk = spec.layers[static_cast<size_t>(src)].kind;
  return pk == LayerKind::kConv || pk == LayerKind::kBatchNorm || pk == LayerKind::kAdd || pk == LayerKind::kDense ||
         pk == LayerKind::kConcat;
}

}  // namespace

Fusion plan_fusion(const NetSpec& spec) {
  const size_t n = spec.layers.size();
  Fusion f;
  f.consumers.assign(n, 0);
  for (const LayerSpec& l : spec.layers)
    for (int src : l.inputs) f.consumers[static_cast<size_t>(src)]++;
  // batch norm, conv or dense → relu pairs where the relu is the only consumer: the
  // producer applies the relu (batch norm's backward too; a conv's or dense's backward
  // leaves the relu's gradient to the relu layer, from the fused output)
  f.fused.assign(n, false);
  for (size_t i = 1; i < n; ++i) {
    const LayerSpec& l = spec.layers[i];
    if (l.kind != LayerKind::kActivation || l.act != ActKind::kRelu || l.inputs.size() != 1) continue;
    const size_t src = static_cast<size_t>(l.inputs[0]);
    const LayerKind k = spec.layers[src].kind;
    if ((k == LayerKind::kBatchNorm || k == LayerKind::kConv || k == LayerKind::kDense) && f.consumers[src] == 1)
      f.fused[src] = true;
  }
  f.relu_in_place.assign(n, false);
  for (size_t i = 1; i < n; ++i) f.relu_in_place[i] = relu_in_place(spec, f.consumers, i);
  f.pool_after_relu.assign(n, false);
  for (size_t i = 1; i < n; ++i) {
    const LayerSpec& l = spec.layers[i];
    if (l.kind != LayerKind::kMaxPool || l.inputs.size() != 1) continue;
    const size_t relu = static_cast<size_t>(l.inputs[0]);
    const LayerSpec& r = spec.layers[relu];
    if (r.kind != LayerKind::kActivation || r.act != ActKind::kRelu || r.inputs.size() != 1 || f.consumers[relu] != 1)
      continue;
    const size_t src = static_cast<size_t>(r.inputs[0]);
    const LayerKind k = spec.layers[src].kind;
    f.pool_after_relu[i] = f.fused[src] && (k == LayerKind::kConv || k == LayerKind::kDense);
  }
  return f;
}

}  // namespace cohort::backend::cpu
