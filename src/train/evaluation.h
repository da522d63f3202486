// Evaluation: top-1/top-5 accuracy and mean cross-entropy over an evaluation set.
// Padded samples (rows past a batch's valid count) are never counted, and totals are
// summed over ranks before the ratios are taken, so every rank reports the same
// numbers for the whole set. Top-k follows tf.nn.in_top_k: a label is in the top k
// when fewer than k classes score strictly higher; non-finite scores never are.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "optim/distributed_optimizer.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace cohort {

bool in_top_k(const float* scores, int64_t classes, int64_t label, int k);
// −log softmax(scores)[label], computed stably (log-sum-exp).
double softmax_cross_entropy(const float* scores, int64_t classes, int64_t label);

struct EvalTotals {
  int64_t samples = 0;
  int64_t top1 = 0;
  int64_t top5 = 0;
  double loss_sum = 0;
};

struct EvalResult {
  int64_t samples = 0;
  double top1 = 0;  // fractions in [0, 1]
  double top5 = 0;
  double loss = 0;
};

class EvalAccumulator {
 public:
  // logits: f32 [N, C]; labels: i32 or i64 [N] in [0, C); only the first `valid` rows
  // count. Host memory, or logits on a device with `stream` one of its streams and the
  // labels in host memory or on that device (the labels are checked on the host, the
  // counts reduced on the device and read back once). Throws kInvalidArgument naming
  // the bad shape, count or label.
  void add_batch(const Tensor& logits, const Tensor& labels, int64_t valid, const Stream& stream = {});

  const EvalTotals& totals() const { return totals_; }
  // This rank's totals as ratios.
  EvalResult local_result() const;
  // Collective: the totals of all ranks, as ratios.
  EvalResult global_result(Collectives& comm) const;

 private:
  EvalTotals totals_;
};

EvalResult eval_result(const EvalTotals& t);

// Collective: the mean over ranks of each metric, reduced in sorted-name order as
// Horovod's metric averaging does. Every rank must pass the same names; a rank with
// other names is a kMismatch error on every rank.
std::map<std::string, double> average_metrics(const std::map<std::string, double>& metrics, Collectives& comm);

}  // namespace cohort
