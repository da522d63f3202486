#include "train/evaluation.h"

#include <cmath>
#include <cstring>

#include "core/status.h"
#include "kernels/for_each.h"
#include "kernels/metrics.h"
#include "kernels/optim_update.h"

namespace cohort {

bool in_top_k(const float* scores, int64_t classes, int64_t label, int k) {
  return kernels::in_top_k(scores, classes, label, k);
}

double softmax_cross_entropy(const float* scores, int64_t classes, int64_t label) {
  return kernels::softmax_cross_entropy(scores, classes, label);
}

namespace {

// The hits and the loss sum of the first `valid` rows, reduced where `stream` runs
// (device scalars are read back at the end).
template <typename Label>
void add_rows(EvalTotals& totals, const Tensor& logits, const Tensor& labels, int64_t valid, const Stream& stream) {
  const int64_t classes = logits.dim(1);
  const kernels::TopKHits<Label> hits_of{logits.data_as<float>(), labels.data_as<Label>(), classes};
  const kernels::RowCrossEntropy<Label> loss_of{logits.data_as<float>(), labels.data_as<Label>(), classes};
  uint64_t hits = 0;
  double loss = 0;
  if (stream.is_host()) {
    kernels::reduce_into(stream, valid, hits_of, kernels::Plus{}, &hits);
    kernels::reduce_into(stream, valid, loss_of, kernels::Plus{}, &loss);
  } else {
    Tensor sums = Tensor::empty_like(logits, {2}, DType::kF64, stream);  // the u64 hits, the f64 loss
    zero(sums, stream);
    kernels::reduce_into(stream, valid, hits_of, kernels::Plus{}, reinterpret_cast<uint64_t*>(sums.data_as<double>()));
    kernels::reduce_into(stream, valid, loss_of, kernels::Plus{}, sums.data_as<double>() + 1);
    const Tensor back = to_host(sums, stream);
    std::memcpy(&hits, back.data(), sizeof hits);
    loss = back.data_as<double>()[1];
  }
  totals.top1 += static_cast<int64_t>(hits & 0xffffffffu);
  totals.top5 += static_cast<int64_t>(hits >> 32);
  totals.loss_sum += loss;
}

}  // namespace

void EvalAccumulator::add_batch(const Tensor& logits, const Tensor& labels, int64_t valid, const Stream& stream) {
  const bool here = logits.device().is_host() ? stream.is_host() : logits.device() == stream.device();
  require(logits.dtype() == DType::kF32 && logits.ndim() == 2 && here && logits.is_contiguous(),
          "evaluation: logits must be a contiguous f32 [N, classes] tensor on the stream's device (",
          stream.device().to_string(), "), got ", logits.describe());
  const int64_t n = logits.dim(0), classes = logits.dim(1);
  require(classes >= 1, "evaluation: logits have no classes");
  require(
      (labels.dtype() == DType::kI32 || labels.dtype() == DType::kI64) && labels.ndim() == 1 && labels.dim(0) == n &&
          (labels.device().is_host() || labels.device() == logits.device()) && labels.is_contiguous(),
      "evaluation: labels must be i32 or i64 [", n, "] in host memory or beside the logits, got ", labels.describe());
  // The labels are checked on the host (a copy of a device batch's: N integers).
  const Tensor host_labels = labels.device().is_host() ? labels : to_host(labels, stream);
  require(valid >= 0 && valid <= n, "evaluation: valid count ", valid, " is outside [0, ", n, "]");
  for (int64_t i = 0; i < valid; ++i) {
    const int64_t label =
        labels.dtype() == DType::kI32 ? host_labels.data_as<int32_t>()[i] : host_labels.data_as<int64_t>()[i];
    require(label >= 0 && label < classes, "evaluation: label ", label, " of sample ", i, " is outside [0, ", classes,
            ")");
  }
  // A batch of fewer than 2^32 rows: the packed top-1 and top-5 counts cannot overflow.
  require(valid < (int64_t{1} << 32), "evaluation: ", valid, " rows in one batch are too many");
  Tensor where = labels;
  if (!stream.is_host() && labels.device().is_host()) {
    where = Tensor::empty_like(logits, labels.shape(), labels.dtype(), stream);
    copy(where, labels, stream);
  }
  if (labels.dtype() == DType::kI32)
    add_rows<int32_t>(totals_, logits, where, valid, stream);
  else
    add_rows<int64_t>(totals_, logits, where, valid, stream);
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
