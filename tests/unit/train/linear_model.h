// A linear model with a hand-written backward pass for distributed-optimizer tests:
// no batch norm or dropout, so data-parallel training on shards of a batch must equal
// single-rank training on the whole batch.
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "optim/named_tensor.h"

namespace cohort {

constexpr int kIn = 4, kOut = 3, kGlobalBatch = 12, kSteps = 6;

// y = W x + b with loss mean_over_batch 0.5 ‖Wx + b − t‖².
struct Linear {
  Tensor w = Tensor::empty({kOut, kIn}, DType::kF32);
  Tensor b = Tensor::empty({kOut}, DType::kF32);
  Tensor gw = Tensor::empty({kOut, kIn}, DType::kF32);
  Tensor gb = Tensor::empty({kOut}, DType::kF32);

  explicit Linear(float seed) {
    for (int i = 0; i < kOut * kIn; ++i) w.data_as<float>()[i] = std::sin(seed + 0.7f * static_cast<float>(i));
    for (int i = 0; i < kOut; ++i) b.data_as<float>()[i] = 0.1f * static_cast<float>(i) - seed;
  }
  std::vector<ParamGrad> params() { return {{"fc.weight", w, gw}, {"fc.bias", b, gb}}; }

  // Gradients of the samples [begin, end) of step `step`'s global batch.
  void backward(int step, int begin, int end) {
    std::memset(gw.data(), 0, gw.nbytes());
    std::memset(gb.data(), 0, gb.nbytes());
    const float inv = 1.0f / static_cast<float>(end - begin);
    for (int s = begin; s < end; ++s) {
      float x[kIn], t[kOut];
      for (int i = 0; i < kIn; ++i)
        x[i] = std::cos(0.3f * static_cast<float>(step * kGlobalBatch + s) + static_cast<float>(i));
      for (int o = 0; o < kOut; ++o) t[o] = 0.5f * x[o] - 0.25f * x[(o + 1) % kIn] + 0.1f * static_cast<float>(o);
      for (int o = 0; o < kOut; ++o) {
        float y = b.data_as<float>()[o];
        for (int i = 0; i < kIn; ++i) y += w.data_as<float>()[o * kIn + i] * x[i];
        const float r = (y - t[o]) * inv;
        gb.data_as<float>()[o] += r;
        for (int i = 0; i < kIn; ++i) gw.data_as<float>()[o * kIn + i] += r * x[i];
      }
    }
  }
};

}  // namespace cohort
