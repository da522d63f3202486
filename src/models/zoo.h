// The model zoo: a registry name → builder. Each family lives in its own file; adding
// a model is one builder function there and one line in zoo.cc's table. Builders only
// describe the network (shape inference), so counting parameters allocates nothing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace cohort {

struct ModelOptions {
  int num_classes = 0;  // 0 = the model's default
  int image_size = 0;   // 0 = the model's default
  float label_smoothing = 0.f;
  bool with_loss = true;  // end in a softmax cross-entropy loss
};

struct ModelInfo {
  const char* name;
  int image_size;                        // default input height and width
  int channels;                          // input channels
  int num_classes;                       // default classes
  void (*build)(Graph& g, int classes);  // adds every layer after the input
};

const std::vector<ModelInfo>& model_registry();
std::string model_names();  // "alexnet, alexnet_owt, ..."
// Throws kInvalidArgument for an unknown name (listing the valid ones) or a bad size.
std::unique_ptr<Graph> build_model(const std::string& name, const ModelOptions& options);

// Builders, one family per file.
void build_trivial(Graph& g, int classes);
void build_alexnet(Graph& g, int classes);
void build_alexnet_owt(Graph& g, int classes);
void build_vgg16(Graph& g, int classes);
void build_googlenet(Graph& g, int classes);
void build_resnet18(Graph& g, int classes);
void build_resnet34(Graph& g, int classes);
void build_resnet50(Graph& g, int classes);
void build_resnet101(Graph& g, int classes);
void build_resnet152(Graph& g, int classes);
void build_mnist_cnn(Graph& g, int classes);
void build_resnet20(Graph& g, int classes);
void build_resnet32(Graph& g, int classes);
void build_resnet44(Graph& g, int classes);
void build_resnet56(Graph& g, int classes);
void build_resnet110(Graph& g, int classes);

namespace zoo {
// conv → batch norm (→ relu): the unit most modern models are made of.
int conv_bn(Graph& g, int in, const std::string& name, int out, int k, int stride, int pad, bool relu,
            float bn_eps = 1e-5f);
}  // namespace zoo

}  // namespace cohort
