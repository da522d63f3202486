#include "backend/net_spec.h"

namespace cohort::backend {

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kInput:
      return "input";
    case LayerKind::kConv:
      return "conv";
    case LayerKind::kDense:
      return "dense";
    case LayerKind::kBatchNorm:
      return "batch_norm";
    case LayerKind::kMaxPool:
      return "max_pool";
    case LayerKind::kAvgPool:
      return "avg_pool";
    case LayerKind::kGlobalAvgPool:
      return "global_avg_pool";
    case LayerKind::kLrn:
      return "lrn";
    case LayerKind::kActivation:
      return "activation";
    case LayerKind::kDropout:
      return "dropout";
    case LayerKind::kConcat:
      return "concat";
    case LayerKind::kAdd:
      return "add";
    case LayerKind::kFlatten:
      return "flatten";
    case LayerKind::kShortcutA:
      return "shortcut_a";
    case LayerKind::kSoftmaxXent:
      return "softmax_xent";
  }
  return "?";
}

const char* act_kind_name(ActKind kind) {
  switch (kind) {
    case ActKind::kRelu:
      return "relu";
    case ActKind::kLeakyRelu:
      return "leaky_relu";
    case ActKind::kElu:
      return "elu";
    case ActKind::kTanh:
      return "tanh";
    case ActKind::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

int64_t window_out(int64_t in, int k, int s, int p, int d, bool ceil_mode) {
  const int64_t span = static_cast<int64_t>(d) * (k - 1) + 1;
  const int64_t room = in + 2 * static_cast<int64_t>(p) - span;
  if (room < 0) return 0;
  int64_t out = (ceil_mode ? (room + s - 1) / s : room / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

}  // namespace cohort::backend
