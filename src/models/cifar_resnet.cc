// CIFAR ResNets (He et al. 2016, section 4.2): 16-32-64 channels, n basic blocks per
// stage (6n + 2 layers), option-A shortcuts (subsample + zero-padded channels).
#include "models/zoo.h"

namespace cohort {
namespace {

void cifar_resnet(Graph& g, int classes, int n) {
  int h = zoo::conv_bn(g, g.input(), "conv1", 16, 3, 1, 1, true);
  int channels = 16;
  for (int stage = 0; stage < 3; ++stage) {
    const int planes = 16 << stage;
    for (int b = 0; b < n; ++b) {
      const int stride = b == 0 && stage > 0 ? 2 : 1;
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      int r = zoo::conv_bn(g, h, p + ".conv1", planes, 3, stride, 1, true);
      r = zoo::conv_bn(g, r, p + ".conv2", planes, 3, 1, 1, false);
      int sc = h;
      if (stride != 1 || channels != planes) sc = g.shortcut_a(h, p + ".shortcut", planes, stride);
      h = g.relu(g.add({r, sc}, p + ".add"), p + ".relu");
      channels = planes;
    }
  }
  h = g.global_avg_pool(h, "avgpool");
  g.dense(h, "fc", classes);
}

}  // namespace

void build_resnet20(Graph& g, int classes) { cifar_resnet(g, classes, 3); }
void build_resnet32(Graph& g, int classes) { cifar_resnet(g, classes, 5); }
void build_resnet44(Graph& g, int classes) { cifar_resnet(g, classes, 7); }
void build_resnet56(Graph& g, int classes) { cifar_resnet(g, classes, 9); }
void build_resnet110(Graph& g, int classes) { cifar_resnet(g, classes, 18); }

}  // namespace cohort
