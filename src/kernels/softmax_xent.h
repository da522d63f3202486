// Softmax cross-entropy with label smoothing, one row (sample) at a time. The target
// is (1 - eps) on the label plus eps / K on every class, as in PyTorch and TF.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/hd.h"

namespace cohort::kernels {

// Returns the loss of one row of K logits; when grad is not null writes
// scale * (softmax - target) into it.
COHORT_HD float softmax_xent_row(const float* logits, int64_t k, int64_t label, float smoothing, float* grad,
                                 float scale) {
  float mx = logits[0];
  for (int64_t j = 1; j < k; ++j) mx = logits[j] > mx ? logits[j] : mx;
  double sum = 0;
  for (int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(logits[j] - mx));
  const double log_sum = std::log(sum);
  const double off = smoothing / static_cast<double>(k);
  const double on = 1.0 - smoothing + off;
  double loss = 0;
  for (int64_t j = 0; j < k; ++j) {
    const double log_p = static_cast<double>(logits[j] - mx) - log_sum;
    const double target = j == label ? on : off;
    loss -= target * log_p;
    if (grad) grad[j] = static_cast<float>(scale * (std::exp(log_p) - target));
  }
  return static_cast<float>(loss);
}

}  // namespace cohort::kernels
