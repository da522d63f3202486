// Softmax cross-entropy with label smoothing, one row (sample) at a time. The target
// is (1 - eps) on the label plus eps / K on every class, as in PyTorch and TF.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/hd.h"

namespace cohort::kernels {

// The targets of K classes with smoothing eps: on the label, and on every other class.
struct XentTargets {
  double on, off;
};
COHORT_HD XentTargets xent_targets(int64_t k, float smoothing) {
  const double off = smoothing / static_cast<double>(k);
  return {1.0 - smoothing + off, off};
}

// One class's term of a row's loss, −target · log p, where mx is the row's largest
// logit and log_sum = log Σ exp(logit − mx); when grad is not null writes
// scale * (p − target) into it.
COHORT_HD double xent_term(float logit, float mx, double log_sum, double target, float* grad, float scale) {
  const double log_p = static_cast<double>(logit - mx) - log_sum;
  if (grad) *grad = static_cast<float>(scale * (std::exp(log_p) - target));
  return -target * log_p;
}

// Returns the loss of one row of K logits; when grad is not null writes
// scale * (softmax - target) into it.
COHORT_HD float softmax_xent_row(const float* logits, int64_t k, int64_t label, float smoothing, float* grad,
                                 float scale) {
  float mx = logits[0];
  for (int64_t j = 1; j < k; ++j) mx = logits[j] > mx ? logits[j] : mx;
  double sum = 0;
  for (int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(logits[j] - mx));
  const double log_sum = std::log(sum);
  const XentTargets t = xent_targets(k, smoothing);
  double loss = 0;
  for (int64_t j = 0; j < k; ++j)
    loss += xent_term(logits[j], mx, log_sum, j == label ? t.on : t.off, grad ? grad + j : nullptr, scale);
  return static_cast<float>(loss);
}

}  // namespace cohort::kernels
