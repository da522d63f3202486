// VGG-16 (configuration D, no batch norm), as torchvision builds it.
#include "models/zoo.h"

namespace cohort {

void build_vgg16(Graph& g, int classes) {
  const int stages[5][2] = {{64, 2}, {128, 2}, {256, 3}, {512, 3}, {512, 3}};
  int h = g.input();
  for (int s = 0; s < 5; ++s) {
    for (int i = 0; i < stages[s][1]; ++i) {
      const std::string name = "conv" + std::to_string(s + 1) + "_" + std::to_string(i + 1);
      h = g.relu(g.conv(h, name, stages[s][0], {3, 3, 1, 1, 1, 1, true}), name + ".relu");
    }
    h = g.max_pool(h, "pool" + std::to_string(s + 1), {2, 2, 0, false});
  }
  h = g.flatten(h, "flatten");
  h = g.dropout(g.relu(g.dense(h, "fc6", 4096), "relu6"), "drop6", 0.5f);
  h = g.dropout(g.relu(g.dense(h, "fc7", 4096), "relu7"), "drop7", 0.5f);
  g.dense(h, "fc8", classes);
}

}  // namespace cohort
