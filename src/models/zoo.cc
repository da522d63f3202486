#include "models/zoo.h"

#include "core/status.h"

namespace cohort {

const std::vector<ModelInfo>& model_registry() {
  static const std::vector<ModelInfo> models{
      // name          size  ch  classes builder
      {"alexnet", 227, 3, 1000, build_alexnet},     {"alexnet_owt", 224, 3, 1000, build_alexnet_owt},
      {"googlenet", 224, 3, 1000, build_googlenet}, {"mnist_cnn", 28, 1, 10, build_mnist_cnn},
      {"resnet101", 224, 3, 1000, build_resnet101}, {"resnet110", 32, 3, 10, build_resnet110},
      {"resnet152", 224, 3, 1000, build_resnet152}, {"resnet18", 224, 3, 1000, build_resnet18},
      {"resnet20", 32, 3, 10, build_resnet20},      {"resnet32", 32, 3, 10, build_resnet32},
      {"resnet34", 224, 3, 1000, build_resnet34},   {"resnet44", 32, 3, 10, build_resnet44},
      {"resnet50", 224, 3, 1000, build_resnet50},   {"resnet56", 32, 3, 10, build_resnet56},
      {"trivial", 224, 3, 1000, build_trivial},     {"vgg16", 224, 3, 1000, build_vgg16},
  };
  return models;
}

std::string model_names() {
  std::string out;
  for (const ModelInfo& m : model_registry()) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

std::unique_ptr<Graph> build_model(const std::string& name, const ModelOptions& options) {
  for (const ModelInfo& m : model_registry()) {
    if (name != m.name) continue;
    const int size = options.image_size > 0 ? options.image_size : m.image_size;
    const int classes = options.num_classes > 0 ? options.num_classes : m.num_classes;
    auto g = std::make_unique<Graph>(Shape{m.channels, size, size});
    try {
      m.build(*g, classes);
    } catch (const Error& e) {
      fail(e.code(), "model '", name, "' cannot take image_size=", size, ": ", e.what());
    }
    if (options.with_loss) g->softmax_xent(g->num_layers() - 1, "loss", options.label_smoothing);
    return g;
  }
  fail(Code::kInvalidArgument, "Invalid model type: '", name, "'; valid models: ", model_names());
}

namespace zoo {

int conv_bn(Graph& g, int in, const std::string& name, int out, int k, int stride, int pad, bool relu, float bn_eps) {
  int h = g.conv(in, name, out, ConvOptions{k, k, stride, pad, 1, 1, false});
  // "layer1.0.conv1" → "layer1.0.bn1", as torchvision names them
  std::string bn = name;
  if (auto pos = bn.rfind("conv"); pos != std::string::npos)
    bn.replace(pos, 4, "bn");
  else
    bn += ".bn";
  h = g.batch_norm(h, bn, bn_eps);
  return relu ? g.relu(h, bn + ".relu") : h;
}

}  // namespace zoo
}  // namespace cohort
