// Host tensors viewing the vectors tests fill: the network's batches, labels and
// outputs, shaped as a graph takes and gives them.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "tensor/tensor.h"

namespace cohort::test {

// A view of `v` as tensor `shape` (v must hold at least that many elements).
inline Tensor view(std::vector<float>& v, const Shape& shape) { return Tensor::wrap(v.data(), shape, DType::kF32); }

// A batch of n samples of layer `layer`'s shape ({C, H, W} in `layout`, or {F}).
inline Tensor batch_view(std::vector<float>& v, const Graph& g, int64_t n, Layout layout, int layer = 0) {
  const Shape& s = g.shape(layer);
  Shape shape{n};
  if (s.size() == 3 && layout == Layout::kNHWC)
    shape.insert(shape.end(), {s[1], s[2], s[0]});
  else
    shape.insert(shape.end(), s.begin(), s.end());
  return Tensor::wrap(v.data(), shape, DType::kF32);
}

// The output of the graph's last non-loss layer (or `layer`) for n samples.
inline Tensor output_view(std::vector<float>& v, const Graph& g, int64_t n, Layout layout, int layer = -1) {
  return batch_view(v, g, n, layout, layer < 0 ? g.output_layer() : layer);
}

inline Tensor labels_view(std::vector<int32_t>& y, int64_t n) { return Tensor::wrap(y.data(), {n}, DType::kI32); }

}  // namespace cohort::test
