// Evaluation metrics per row of logits, written once for host and device: whether the
// label is in the top k (tf.nn.in_top_k: fewer than k classes score strictly higher;
// a non-finite score never is) and the row's cross-entropy. Summed over a batch with
// kernels::reduce_into.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/hd.h"

namespace cohort::kernels {

COHORT_HD bool finite(float v) { return v - v == 0.0f; }

COHORT_HD bool in_top_k(const float* scores, int64_t classes, int64_t label, int k) {
  const float target = scores[label];
  if (!finite(target)) return false;
  int64_t higher = 0;
  for (int64_t c = 0; c < classes; ++c) {
    if (!finite(scores[c])) return false;
    if (scores[c] > target) ++higher;
  }
  return higher < k;
}

// −log softmax(scores)[label], computed stably (log-sum-exp).
COHORT_HD double softmax_cross_entropy(const float* scores, int64_t classes, int64_t label) {
  double top = scores[0];
  for (int64_t c = 1; c < classes; ++c) top = top > scores[c] ? top : static_cast<double>(scores[c]);
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += exp(static_cast<double>(scores[c]) - top);
  return log(sum) + top - static_cast<double>(scores[label]);
}

// Row i's top-1 hit in the low 32 bits and top-5 hit in the high 32 bits, so that one
// sum counts both. Labels are checked by the caller.
template <typename Label>
struct TopKHits {
  const float* logits;
  const Label* labels;
  int64_t classes;
  COHORT_HD uint64_t operator()(int64_t i) const {
    const float* row = logits + i * classes;
    const int64_t label = static_cast<int64_t>(labels[i]);
    return (in_top_k(row, classes, label, 1) ? 1ull : 0ull) | (in_top_k(row, classes, label, 5) ? 1ull << 32 : 0ull);
  }
};

template <typename Label>
struct RowCrossEntropy {
  const float* logits;
  const Label* labels;
  int64_t classes;
  COHORT_HD double operator()(int64_t i) const {
    return softmax_cross_entropy(logits + i * classes, classes, static_cast<int64_t>(labels[i]));
  }
};

}  // namespace cohort::kernels
