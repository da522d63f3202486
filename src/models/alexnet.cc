// AlexNet: the original (Krizhevsky et al. 2012: LRN after conv1 and conv2; conv2, 4
// and 5 in two groups; 227x227) and torchvision's "one weird trick" variant.
#include "models/zoo.h"

namespace cohort {
namespace {

void classifier(Graph& g, int h, int classes) {
  h = g.flatten(h, "flatten");
  h = g.dropout(h, "drop6", 0.5f);
  h = g.relu(g.dense(h, "fc6", 4096), "relu6");
  h = g.dropout(h, "drop7", 0.5f);
  h = g.relu(g.dense(h, "fc7", 4096), "relu7");
  g.dense(h, "fc8", classes);
}

}  // namespace

void build_alexnet(Graph& g, int classes) {
  const PoolOptions pool{3, 2, 0, false};
  int h = g.relu(g.conv(g.input(), "conv1", 96, {11, 11, 4, 0, 1, 1, true}), "relu1");
  h = g.max_pool(g.lrn(h, "norm1", 5, 1e-4f, 0.75f, 1.f), "pool1", pool);
  h = g.relu(g.conv(h, "conv2", 256, {5, 5, 1, 2, 1, 2, true}), "relu2");
  h = g.max_pool(g.lrn(h, "norm2", 5, 1e-4f, 0.75f, 1.f), "pool2", pool);
  h = g.relu(g.conv(h, "conv3", 384, {3, 3, 1, 1, 1, 1, true}), "relu3");
  h = g.relu(g.conv(h, "conv4", 384, {3, 3, 1, 1, 1, 2, true}), "relu4");
  h = g.relu(g.conv(h, "conv5", 256, {3, 3, 1, 1, 1, 2, true}), "relu5");
  h = g.max_pool(h, "pool5", pool);
  classifier(g, h, classes);
}

void build_alexnet_owt(Graph& g, int classes) {
  const PoolOptions pool{3, 2, 0, false};
  int h = g.relu(g.conv(g.input(), "conv1", 64, {11, 11, 4, 2, 1, 1, true}), "relu1");
  h = g.max_pool(h, "pool1", pool);
  h = g.relu(g.conv(h, "conv2", 192, {5, 5, 1, 2, 1, 1, true}), "relu2");
  h = g.max_pool(h, "pool2", pool);
  h = g.relu(g.conv(h, "conv3", 384, {3, 3, 1, 1, 1, 1, true}), "relu3");
  h = g.relu(g.conv(h, "conv4", 256, {3, 3, 1, 1, 1, 1, true}), "relu4");
  h = g.relu(g.conv(h, "conv5", 256, {3, 3, 1, 1, 1, 1, true}), "relu5");
  h = g.max_pool(h, "pool5", pool);
  classifier(g, h, classes);
}

}  // namespace cohort
