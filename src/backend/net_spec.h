// The description of a network that a backend executes: a topologically ordered
// list of layers with their hyper-parameters, per-sample output shapes and the
// indices of their parameters. src/graph builds it; backends only read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace cohort::backend {

enum class LayerKind {
  kInput,
  kConv,
  kDense,
  kBatchNorm,
  kMaxPool,
  kAvgPool,
  kGlobalAvgPool,
  kLrn,
  kActivation,
  kDropout,
  kConcat,
  kAdd,
  kFlatten,
  kShortcutA,  // ResNet option-A shortcut: spatial subsampling + zero channels
  kSoftmaxXent,
};

enum class ActKind { kRelu, kLeakyRelu, kElu, kTanh, kSigmoid };

enum class Layout { kNCHW, kNHWC };

const char* layer_kind_name(LayerKind kind);
const char* act_kind_name(ActKind kind);

struct Window {  // convolution and pooling geometry (height, width)
  int kh = 1, kw = 1;
  int sh = 1, sw = 1;
  int ph = 0, pw = 0;  // padding before (top, left)
  int dh = 1, dw = 1;  // dilation (1 = dense)
  bool ceil_mode = false;
};

struct LayerSpec {
  LayerKind kind = LayerKind::kInput;
  std::string name;
  std::vector<int> inputs;  // indices of earlier layers
  Shape shape;              // per-sample output shape: {C, H, W} or {F}; {} for a loss
  Window win;
  int out_channels = 0;  // conv, dense (features), shortcut_a
  int groups = 1;
  bool bias = true;
  ActKind act = ActKind::kRelu;
  float alpha = 0.f;                   // leaky relu slope, elu alpha
  float p = 0.f;                       // dropout probability
  float eps = 1e-5f, momentum = 0.1f;  // batch norm
  int lrn_size = 5;
  float lrn_alpha = 1e-4f, lrn_beta = 0.75f, lrn_k = 1.f;
  float label_smoothing = 0.f;
  std::vector<int> params;  // conv/dense: weight[, bias]; batch norm: scale, shift
  std::vector<int> states;  // batch norm: running mean, running variance
};

struct NetSpec {
  std::vector<LayerSpec> layers;  // layers[0] is the input
  std::vector<Shape> param_shapes;
  std::vector<Shape> state_shapes;
  bool has_loss() const { return !layers.empty() && layers.back().kind == LayerKind::kSoftmaxXent; }
};

// Output size of a window along one axis (floor, or PyTorch's ceil_mode rule: the
// last window must start inside the input or the left padding).
int64_t window_out(int64_t in, int k, int s, int p, int d, bool ceil_mode);

}  // namespace cohort::backend
