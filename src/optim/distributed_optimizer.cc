#include "optim/distributed_optimizer.h"

#include <cstring>
#include <set>

#include "core/config.h"
#include "core/status.h"
#include "kernels/f16_compress.h"
#include "kernels/for_each.h"
#include "kernels/optim_update.h"
#include "tensor/device_api.h"

namespace cohort {
namespace {

// A 64-bit hash of a tensor's bytes (for comparing parameters across ranks).
int64_t content_hash(const Tensor& device_or_host) {
  const Tensor t = device_or_host.device().is_host() ? device_or_host : to_host(device_or_host);
  const auto* p = static_cast<const unsigned char*>(t.data());
  const size_t n = t.nbytes();
  uint64_t h = 0xcbf29ce484222325ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  h ^= h >> 32;
  return static_cast<int64_t>(h);
}

}  // namespace

void SingleRankCollectives::allreduce_async(const std::string& name, Tensor t, double prescale, double postscale,
                                            const Event& ready) {
  if (!(t.device().is_host() && t.is_contiguous()))
    fail(Code::kInvalidArgument, "allreduce '", name, "': ", t.describe(), " must be a contiguous host tensor");
  ready.synchronize();
  const double s = prescale * postscale;
  if (s == 1.0) return;
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32:
      kernels::for_each(Stream(), n, kernels::Scale{static_cast<float>(s)}, t.data_as<float>());
      return;
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) t.data_as<double>()[i] *= s;
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t& h = t.data_as<uint16_t>()[i];
        h = kernels::compress_f16(static_cast<float>(kernels::decompress_f16(h) * s));
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t& h = t.data_as<uint16_t>()[i];
        h = kernels::float_to_bf16(static_cast<float>(kernels::bf16_to_float(h) * s));
      }
      return;
    case DType::kI64:
      for (int64_t i = 0; i < n; ++i)
        t.data_as<int64_t>()[i] = static_cast<int64_t>(static_cast<double>(t.data_as<int64_t>()[i]) * s);
      return;
    default:
      fail(Code::kUnsupported, "allreduce '", name, "': ", dtype_name(t.dtype()), " is not supported");
  }
}

void SingleRankCollectives::broadcast(const std::string& name, Tensor t, int root) {
  require(root == 0, "broadcast '", name, "': root ", root, " is not a rank (a single-rank run has only rank 0)");
}

DistributedOptions DistributedOptions::from_config(const Config& config) {
  DistributedOptions o;
  o.backward_passes_per_step = static_cast<int>(config.get_int("backward_passes_per_step"));
  o.compress_f16 = config.get_string("compression") == "f16";
  o.compress_bf16 = config.get_string("compression") == "bf16";
  o.gradient_predivide_factor = config.get_float("gradient_predivide_factor");
  o.capture_update = config.get_string("cuda_graphs") == "on";
  return o;
}

DistributedOptimizer::DistributedOptimizer(Optimizer& optimizer, Collectives& collectives,
                                           std::vector<ParamGrad> params, DistributedOptions options,
                                           const Stream& stream)
    : optimizer_(optimizer),
      comm_(collectives),
      params_(std::move(params)),
      options_(options),
      stream_(stream),
      passes_(params_, options.backward_passes_per_step, stream) {
  require(options_.backward_passes_per_step >= 1, "backward_passes_per_step must be >= 1, got ",
          options_.backward_passes_per_step);
  require(options_.gradient_predivide_factor > 0, "gradient_predivide_factor must be > 0, got ",
          options_.gradient_predivide_factor);
  require(comm_.size() >= 1, "distributed optimizer: collectives report ", comm_.size(), " ranks");
  require(!(options_.compress_f16 && options_.compress_bf16), "compression is f16 or bf16, not both");
  require(options_.exchange || !options_.compressed(),
          "compression compresses exchanged gradients, and this optimizer exchanges none");
  optimizer_.init_state(params_, stream_);  // validates names, dtypes, shapes, devices
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamGrad& p = params_[i];
    if (options_.compressed())
      wire_.push_back(
          Tensor::empty_like(p.grad, p.param.shape(), options_.compress_f16 ? DType::kF16 : DType::kBF16, stream_));
    reduced_.push_back({p.name, p.param, options_.backward_passes_per_step > 1 ? passes_.sum(i) : p.grad});
  }
}

void DistributedOptimizer::gradient_ready(size_t index, const Event& ready) {
  if (passes_.report(index)) exchange(index, ready);
}

void DistributedOptimizer::exchange(size_t index, const Event& ready) {
  const ParamGrad& r = reduced_[index];
  const int64_t n = r.grad.numel();
  if (!options_.exchange) {
    if (options_.average_passes && options_.backward_passes_per_step > 1)
      kernels::for_each(stream_, n, kernels::Scale{1.0f / static_cast<float>(options_.backward_passes_per_step)},
                        r.grad.data_as<float>());
    return;
  }
  const double f = options_.gradient_predivide_factor;
  double post = f / comm_.size();
  if (options_.average_passes) post /= options_.backward_passes_per_step;
  // Alone, the average is the gradient itself: nothing to send, unless compression or a
  // scaling would round it (then it takes the same path as with peers).
  if (comm_.size() == 1 && !options_.compressed() && f == 1.0 && post == 1.0) return;
  // What was enqueued on the compute stream since backward wrote the gradient (sums
  // over passes, compression) is part of what the reduction waits for.
  const bool enqueued = options_.compressed() || options_.backward_passes_per_step > 1;
  if (options_.compressed()) {
    Tensor& wire = wire_[index];
    const auto* g = static_cast<const float*>(r.grad.data_as<float>());
    if (options_.compress_f16)
      kernels::for_each(stream_, n, kernels::CompressF16{static_cast<float>(1.0 / f)}, wire.data_as<uint16_t>(), g);
    else
      kernels::for_each(stream_, n, kernels::CompressBF16{static_cast<float>(1.0 / f)}, wire.data_as<uint16_t>(), g);
    comm_.allreduce_async(r.name, wire, 1.0, 1.0, record_event(stream_));
  } else {
    comm_.allreduce_async(r.name, r.grad, 1.0 / f, post, enqueued ? record_event(stream_) : ready);
  }
}

bool DistributedOptimizer::step(double lr) {
  // A gradient backward did not report (all of them on a rank without valid rows, which
  // zeroes them on the compute stream) is read after the work enqueued so far.
  if (!passes_.end_pass([&](size_t i) { gradient_ready(i, record_event(stream_)); })) return false;
  comm_.wait_all(stream_);
  if (options_.compressed()) {
    double post = options_.gradient_predivide_factor / comm_.size();
    if (options_.average_passes) post /= options_.backward_passes_per_step;
    for (size_t i = 0; i < params_.size(); ++i) {
      float* g = reduced_[i].grad.data_as<float>();
      const auto* w = static_cast<const uint16_t*>(wire_[i].data_as<uint16_t>());
      if (options_.compress_f16)
        kernels::for_each(stream_, reduced_[i].grad.numel(), kernels::DecompressF16{static_cast<float>(post)}, g, w);
      else
        kernels::for_each(stream_, reduced_[i].grad.numel(), kernels::DecompressBF16{static_cast<float>(post)}, g, w);
    }
  }
  skipped_ = false;
  if (options_.capture_update && optimizer_.options().kind != OptimizerKind::kLars) {
    // The overflow check on the device, inside the replayed update; read after it.
    const bool finite = optimizer_.step_captured(reduced_, lr, stream_, scaler_ != nullptr,
                                                 scaler_ != nullptr ? 1.0 / scaler_->scale() : 1.0);
    if (scaler_ != nullptr) scaler_->update(finite);
    skipped_ = !finite;
  } else {
    if (scaler_ != nullptr) {
      const bool finite = scaler_->unscale(reduced_, stream_);
      scaler_->update(finite);
      skipped_ = !finite;
    }
    if (!skipped_) optimizer_.step(reduced_, lr, stream_);
  }
  passes_.clear_sums();
  return true;
}

void DistributedOptimizer::broadcast_parameters(int root) {
  require(root >= 0 && root < comm_.size(), "broadcast_parameters: root ", root, " is not a rank (0..",
          comm_.size() - 1, ")");
  synchronize(stream_);  // the parameters are final
  for (const ParamGrad& p : params_) comm_.broadcast(p.name, p.param, root);
  for (const NamedTensor& e : optimizer_.export_state()) {
    comm_.broadcast("optimizer/" + e.name, e.tensor, root);  // live views: in place
    if (e.name == "step") optimizer_.set_steps(*e.tensor.data_as<int64_t>());
  }
}

void DistributedOptimizer::check_consistency() {
  const int64_t n = static_cast<int64_t>(params_.size());
  Tensor count = Tensor::empty({2}, DType::kI64);
  count.data_as<int64_t>()[0] = n;
  count.data_as<int64_t>()[1] = n * n;
  comm_.allreduce_async("consistency/count", count, 1.0, 1.0);
  comm_.wait_all();
  const int64_t sum = count.data_as<int64_t>()[0], sum_sq = count.data_as<int64_t>()[1];
  if (sum * sum != sum_sq * comm_.size())  // equal only when every rank has n parameters
    fail(Code::kMismatch, "consistency check: ranks have different numbers of parameters (this rank ", n, ", ", sum,
         " over ", comm_.size(), " ranks)");
  Tensor mine = Tensor::empty({n}, DType::kI64);
  for (int64_t i = 0; i < n; ++i) mine.data_as<int64_t>()[i] = content_hash(params_[static_cast<size_t>(i)].param);
  Tensor root = clone_host(mine);
  comm_.broadcast("consistency/hashes", root, 0);
  Tensor differ = Tensor::empty({n}, DType::kI64);
  for (int64_t i = 0; i < n; ++i)
    differ.data_as<int64_t>()[i] = mine.data_as<int64_t>()[i] != root.data_as<int64_t>()[i] ? 1 : 0;
  comm_.allreduce_async("consistency/differ", differ, 1.0, 1.0);
  comm_.wait_all();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ranks = differ.data_as<int64_t>()[i];
    if (ranks != 0)
      fail(Code::kMismatch, "consistency check: parameter '", params_[static_cast<size_t>(i)].name, "' differs on ",
           ranks, " rank(s) from rank 0 (this rank ",
           mine.data_as<int64_t>()[i] == root.data_as<int64_t>()[i] ? "agrees with rank 0" : "differs",
           "); were parameters broadcast from rank 0 after initialisation?");
  }
}

}  // namespace cohort
