// ResNet-18/34/50/101/152 v1.5 (torchvision: stride 2 on the bottleneck's 3x3 conv).
#include "models/zoo.h"

namespace cohort {
namespace {

int basic_block(Graph& g, int in, const std::string& p, int planes, int stride, bool down) {
  int h = zoo::conv_bn(g, in, p + ".conv1", planes, 3, stride, 1, true);
  h = zoo::conv_bn(g, h, p + ".conv2", planes, 3, 1, 1, false);
  int sc = in;
  if (down) sc = zoo::conv_bn(g, in, p + ".downsample.conv", planes, 1, stride, 0, false);
  return g.relu(g.add({h, sc}, p + ".add"), p + ".relu");
}

int bottleneck(Graph& g, int in, const std::string& p, int planes, int stride, bool down) {
  int h = zoo::conv_bn(g, in, p + ".conv1", planes, 1, 1, 0, true);
  h = zoo::conv_bn(g, h, p + ".conv2", planes, 3, stride, 1, true);
  h = zoo::conv_bn(g, h, p + ".conv3", planes * 4, 1, 1, 0, false);
  int sc = in;
  if (down) sc = zoo::conv_bn(g, in, p + ".downsample.conv", planes * 4, 1, stride, 0, false);
  return g.relu(g.add({h, sc}, p + ".add"), p + ".relu");
}

void resnet(Graph& g, int classes, const int (&blocks)[4], bool use_bottleneck) {
  int h = zoo::conv_bn(g, g.input(), "conv1", 64, 7, 2, 3, true);
  h = g.max_pool(h, "maxpool", {3, 2, 1, false});
  int channels = 64;
  const int expansion = use_bottleneck ? 4 : 1;
  for (int stage = 0; stage < 4; ++stage) {
    const int planes = 64 << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      const int stride = b == 0 && stage > 0 ? 2 : 1;
      const bool down = b == 0 && (stride != 1 || channels != planes * expansion);
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      h = use_bottleneck ? bottleneck(g, h, p, planes, stride, down) : basic_block(g, h, p, planes, stride, down);
      channels = planes * expansion;
    }
  }
  h = g.global_avg_pool(h, "avgpool");
  g.dense(h, "fc", classes);
}

}  // namespace

void build_resnet18(Graph& g, int classes) { resnet(g, classes, {2, 2, 2, 2}, false); }
void build_resnet34(Graph& g, int classes) { resnet(g, classes, {3, 4, 6, 3}, false); }
void build_resnet50(Graph& g, int classes) { resnet(g, classes, {3, 4, 6, 3}, true); }
void build_resnet101(Graph& g, int classes) { resnet(g, classes, {3, 4, 23, 3}, true); }
void build_resnet152(Graph& g, int classes) { resnet(g, classes, {3, 8, 36, 3}, true); }

}  // namespace cohort
