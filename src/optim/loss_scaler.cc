#include "optim/loss_scaler.h"

#include <cmath>
#include <optional>
#include <vector>

#include "core/status.h"
#include "kernels/for_each.h"
#include "kernels/optim_update.h"

namespace cohort {

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.initial_scale) {
  require(std::isfinite(options_.initial_scale) && options_.initial_scale > 0,
          "loss scaler: initial scale must be finite and > 0, got ", options_.initial_scale);
  require(options_.growth_factor >= 1, "loss scaler: growth factor must be >= 1, got ", options_.growth_factor);
  require(options_.backoff_factor > 0 && options_.backoff_factor <= 1,
          "loss scaler: backoff factor must be in (0, 1], got ", options_.backoff_factor);
  require(options_.growth_interval >= 1, "loss scaler: growth interval must be >= 1, got ", options_.growth_interval);
}

bool LossScaler::unscale(std::span<const ParamGrad> params, const Stream& stream) const {
  for (const ParamGrad& p : params) {
    const bool here = p.grad.device().is_host() ? stream.is_host() : p.grad.device() == stream.device();
    if (!(p.grad.dtype() == DType::kF32 && here && p.grad.is_contiguous()))  // the message is built only when needed
      fail(Code::kInvalidArgument, "loss scaler: gradient of '", p.name, "' must be a contiguous f32 tensor on ",
           stream.device().to_string(), ", got ", p.grad.describe());
  }
  const float inv = static_cast<float>(1.0 / scale_);
  // One list pass over every gradient (a few launches on a GPU).
  std::vector<kernels::ReduceItem<kernels::UnscaleCount>> items;
  for (const ParamGrad& p : params)
    items.push_back({p.grad.numel(), kernels::UnscaleCount{p.grad.data_as<float>(), inv}});
  if (stream.is_host()) {
    uint32_t nonfinite = 0;
    kernels::reduce_list_into<uint32_t>(stream, items, kernels::Plus{}, &nonfinite);
    return nonfinite == 0;
  }
  if (params.empty()) return true;
  Tensor count = Tensor::empty_like(params.front().grad, {1}, DType::kI32, stream);
  zero(count, stream);
  kernels::reduce_list_into<uint32_t>(stream, items, kernels::Plus{},
                                      reinterpret_cast<uint32_t*>(count.data_as<int32_t>()));
  return *to_host(count, stream).data_as<int32_t>() == 0;
}

void LossScaler::update(bool finite) {
  if (!finite) {
    ++skipped_;
    good_steps_ = 0;
    if (options_.dynamic) scale_ = std::max(scale_ * options_.backoff_factor, 1.0 / 65536.0);
    return;
  }
  if (++good_steps_ >= options_.growth_interval && options_.dynamic) {
    const double grown = scale_ * options_.growth_factor;
    if (std::isfinite(grown) && grown <= 1e30) scale_ = grown;
    good_steps_ = 0;
  }
}

std::vector<NamedTensor> LossScaler::export_state() const {
  Tensor scale = Tensor::empty({1}, DType::kF64);
  *scale.data_as<double>() = scale_;
  Tensor good = Tensor::empty({1}, DType::kI64);
  *good.data_as<int64_t>() = good_steps_;
  return {{"loss_scale/good_steps", good}, {"loss_scale/scale", scale}};
}

void LossScaler::set_state(double scale, int64_t good_steps) {
  require(std::isfinite(scale) && scale > 0, "loss scaler state: scale ", scale, " is not finite and > 0");
  require(good_steps >= 0, "loss scaler state: good_steps ", good_steps, " is negative");
  scale_ = scale;
  good_steps_ = good_steps;
}

void LossScaler::import_state(std::span<const NamedTensor> state) {
  std::optional<double> scale;
  std::optional<int64_t> good;
  for (const NamedTensor& e : state) {
    if (e.name == "loss_scale/scale") {
      require(e.tensor.dtype() == DType::kF64 && e.tensor.numel() == 1, "loss scaler state: '", e.name,
              "' must be one f64, got ", e.tensor.describe());
      scale = *e.tensor.data_as<double>();
    } else if (e.name == "loss_scale/good_steps") {
      require(e.tensor.dtype() == DType::kI64 && e.tensor.numel() == 1, "loss scaler state: '", e.name,
              "' must be one i64, got ", e.tensor.describe());
      good = *e.tensor.data_as<int64_t>();
    } else {
      fail(Code::kInvalidArgument, "loss scaler state: unknown entry '", e.name, "'");
    }
  }
  require(scale && good, "loss scaler state: 'loss_scale/scale' and 'loss_scale/good_steps' are both needed");
  set_state(*scale, *good);
}

}  // namespace cohort
