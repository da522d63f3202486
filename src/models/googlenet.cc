// GoogLeNet (Inception v1) as torchvision builds it: batch-norm convs (eps 0.001), no
// auxiliary heads, ceil-mode pooling, and a 3x3 conv in the "5x5" branch.
#include "models/zoo.h"

namespace cohort {
namespace {

int basic(Graph& g, int in, const std::string& name, int out, int k, int stride, int pad) {
  return zoo::conv_bn(g, in, name + ".conv", out, k, stride, pad, true, 1e-3f);
}

int inception(Graph& g, int in, const std::string& p, int c1, int c3r, int c3, int c5r, int c5, int pp) {
  int b1 = basic(g, in, p + ".branch1", c1, 1, 1, 0);
  int b2 = basic(g, basic(g, in, p + ".branch2.0", c3r, 1, 1, 0), p + ".branch2.1", c3, 3, 1, 1);
  int b3 = basic(g, basic(g, in, p + ".branch3.0", c5r, 1, 1, 0), p + ".branch3.1", c5, 3, 1, 1);
  int b4 = g.max_pool(in, p + ".branch4.pool", {3, 1, 1, true});
  b4 = basic(g, b4, p + ".branch4.1", pp, 1, 1, 0);
  return g.concat({b1, b2, b3, b4}, p + ".concat");
}

}  // namespace

void build_googlenet(Graph& g, int classes) {
  const PoolOptions pool{3, 2, 0, true};
  int h = basic(g, g.input(), "conv1", 64, 7, 2, 3);
  h = g.max_pool(h, "maxpool1", pool);
  h = basic(g, h, "conv2", 64, 1, 1, 0);
  h = basic(g, h, "conv3", 192, 3, 1, 1);
  h = g.max_pool(h, "maxpool2", pool);
  h = inception(g, h, "inception3a", 64, 96, 128, 16, 32, 32);
  h = inception(g, h, "inception3b", 128, 128, 192, 32, 96, 64);
  h = g.max_pool(h, "maxpool3", pool);
  h = inception(g, h, "inception4a", 192, 96, 208, 16, 48, 64);
  h = inception(g, h, "inception4b", 160, 112, 224, 24, 64, 64);
  h = inception(g, h, "inception4c", 128, 128, 256, 24, 64, 64);
  h = inception(g, h, "inception4d", 112, 144, 288, 32, 64, 64);
  h = inception(g, h, "inception4e", 256, 160, 320, 32, 128, 128);
  h = g.max_pool(h, "maxpool4", {2, 2, 0, true});
  h = inception(g, h, "inception5a", 256, 160, 320, 32, 128, 128);
  h = inception(g, h, "inception5b", 384, 192, 384, 48, 128, 128);
  h = g.global_avg_pool(h, "avgpool");
  h = g.dropout(h, "dropout", 0.2f);
  g.dense(h, "fc", classes);
}

}  // namespace cohort
