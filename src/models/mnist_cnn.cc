// The labs' small CNN (the Keras MNIST example): conv32-conv64-maxpool-dropout 0.25-
// dense128-dropout 0.5-dense10 on 28x28x1.
#include "models/zoo.h"

namespace cohort {

void build_mnist_cnn(Graph& g, int classes) {
  int h = g.relu(g.conv(g.input(), "conv1", 32, {3, 3, 1, 0, 1, 1, true}), "relu1");
  h = g.relu(g.conv(h, "conv2", 64, {3, 3, 1, 0, 1, 1, true}), "relu2");
  h = g.max_pool(h, "pool", {2, 2, 0, false});
  h = g.dropout(h, "drop1", 0.25f);
  h = g.flatten(h, "flatten");
  h = g.relu(g.dense(h, "fc1", 128), "relu3");
  h = g.dropout(h, "drop2", 0.5f);
  g.dense(h, "fc2", classes);
}

}  // namespace cohort
