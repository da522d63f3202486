#include "train/evaluation.h"

#include <cmath>
#include <cstring>

#include "core/status.h"

namespace cohort {

bool in_top_k(const float* scores, int64_t classes, int64_t label, int k) {
  const float target = scores[label];
  if (!std::isfinite(target)) return false;
  int64_t higher = 0;
  for (int64_t c = 0; c < classes; ++c) {
    if (!std::isfinite(scores[c])) return false;
    if (scores[c] > target) ++higher;
  }
  return higher < k;
}

double softmax_cross_entropy(const float* scores, int64_t classes, int64_t label) {
  double top = scores[0];
  for (int64_t c = 1; c < classes; ++c) top = std::max(top, static_cast<double>(scores[c]));
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(scores[c]) - top);
  return std::log(sum) + top - static_cast<double>(scores[label]);
}

void EvalAccumulator::add_batch(const Tensor& logits, const Tensor& labels, int64_t valid) {
  require(logits.dtype() == DType::kF32 && logits.ndim() == 2 && logits.device().is_host() && logits.is_contiguous(),
          "evaluation: logits must be a contiguous f32 [N, classes] host tensor, got ", logits.describe());
  const int64_t n = logits.dim(0), classes = logits.dim(1);
  require(classes >= 1, "evaluation: logits have no classes");
  require((labels.dtype() == DType::kI32 || labels.dtype() == DType::kI64) && labels.ndim() == 1 &&
              labels.dim(0) == n && labels.device().is_host() && labels.is_contiguous(),
          "evaluation: labels must be i32 or i64 [", n, "] on the host, got ", labels.describe());
  require(valid >= 0 && valid <= n, "evaluation: valid count ", valid, " is outside [0, ", n, "]");
  for (int64_t i = 0; i < valid; ++i) {
    const int64_t label = labels.dtype() == DType::kI32 ? labels.data_as<int32_t>()[i] : labels.data_as<int64_t>()[i];
    require(label >= 0 && label < classes, "evaluation: label ", label, " of sample ", i, " is outside [0, ", classes,
            ")");
    const float* row = logits.data_as<float>() + i * classes;
    totals_.top1 += in_top_k(row, classes, label, 1) ? 1 : 0;
    totals_.top5 += in_top_k(row, classes, label, 5) ? 1 : 0;
    totals_.loss_sum += softmax_cross_entropy(row, classes, label);
  }
  totals_.samples += valid;
}

EvalResult eval_result(const EvalTotals& t) {
  EvalResult r;
  r.samples = t.samples;
  if (t.samples == 0) return r;
  const double n = static_cast<double>(t.samples);
  r.top1 = static_cast<double>(t.top1) / n;
  r.top5 = static_cast<double>(t.top5) / n;
  r.loss = t.loss_sum / n;
  return r;
}

EvalResult EvalAccumulator::local_result() const { return eval_result(totals_); }

EvalResult EvalAccumulator::global_result(Collectives& comm) const {
  Tensor counts = Tensor::empty({3}, DType::kI64);
  counts.data_as<int64_t>()[0] = totals_.samples;
  counts.data_as<int64_t>()[1] = totals_.top1;
  counts.data_as<int64_t>()[2] = totals_.top5;
  Tensor loss = Tensor::empty({1}, DType::kF64);
  *loss.data_as<double>() = totals_.loss_sum;
  comm.allreduce_async("eval/counts", counts, 1.0, 1.0);
  comm.allreduce_async("eval/loss_sum", loss, 1.0, 1.0);
  comm.wait_all();
  EvalTotals all;
  all.samples = counts.data_as<int64_t>()[0];
  all.top1 = counts.data_as<int64_t>()[1];
  all.top5 = counts.data_as<int64_t>()[2];
  all.loss_sum = *loss.data_as<double>();
  return eval_result(all);
}

std::map<std::string, double> average_metrics(const std::map<std::string, double>& metrics, Collectives& comm) {
  // Agree on the names first: Σ hash = size × hash only if all ranks pass the same set
  // (with overwhelming probability), and Σ count = size × count.
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, value] : metrics) {
    for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ 0xFF) * 1099511628211ull;
  }
  Tensor check = Tensor::empty({2}, DType::kI64);
  const int64_t mine[2] = {static_cast<int64_t>(h >> 34), static_cast<int64_t>(metrics.size())};
  std::memcpy(check.data(), mine, sizeof mine);
  comm.allreduce_async("metrics/names", check, 1.0, 1.0);
  comm.wait_all();
  // A 30-bit hash: sums cannot overflow and are exact even where a transport sums in f64.
  const auto* sums = check.data_as<int64_t>();
  const bool same = sums[0] == mine[0] * comm.size() && sums[1] == mine[1] * comm.size();
  Tensor verdict = Tensor::empty({1}, DType::kI64);
  *verdict.data_as<int64_t>() = same ? 0 : 1;
  comm.allreduce_async("metrics/verdict", verdict, 1.0, 1.0);
  comm.wait_all();
  if (*verdict.data_as<int64_t>() != 0)
    fail(Code::kMismatch, "average_metrics: ranks passed different metric names (noticed on ",
         *verdict.data_as<int64_t>(), " of ", comm.size(), " ranks; this rank has ", metrics.size(), " metrics)");
  if (metrics.empty()) return {};
  Tensor values = Tensor::empty({static_cast<int64_t>(metrics.size())}, DType::kF64);
  int64_t i = 0;
  for (const auto& [name, value] : metrics) values.data_as<double>()[i++] = value;  // sorted by name
  comm.allreduce_async("metrics/values", values, 1.0, 1.0 / comm.size());
  comm.wait_all();
  std::map<std::string, double> out;
  i = 0;
  for (const auto& [name, value] : metrics) out[name] = values.data_as<double>()[i++];
  return out;
}

}  // namespace cohort
