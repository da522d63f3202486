#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>

#include "core/config.h"
#include "core/status.h"
#include "core/strings.h"

namespace cohort {

LrScheduleKind parse_lr_schedule(std::string_view name) {
  if (name == "constant") return LrScheduleKind::kConstant;
  if (name == "step") return LrScheduleKind::kStep;
  if (name == "poly" || name == "polynomial") return LrScheduleKind::kPoly;
  if (name == "cosine") return LrScheduleKind::kCosine;
  fail(Code::kInvalidArgument, "unknown lr_schedule '", name, "'; expected one of constant|step|poly|cosine");
}

std::vector<double> parse_epoch_list(std::string_view text, std::string_view key) {
  std::vector<double> out;
  if (trim(text).empty()) return out;
  for (const std::string& raw : split(text, ',')) {
    std::string item = trim(raw);
    std::optional<double> v = parse_double(item);
    require(v && std::isfinite(*v) && *v >= 0, "option '", key, "': '", item,
            "' is not an epoch number (expected a comma-separated list such as 30,60,80)");
    require(out.empty() || *v > out.back(), "option '", key, "': epochs must increase, got ", *v, " after ",
            out.empty() ? 0.0 : out.back());
    out.push_back(*v);
  }
  return out;
}

LrScheduleOptions LrScheduleOptions::from_config(const Config& config, int64_t global_batch, int64_t steps_per_epoch,
                                                 int64_t total_steps) {
  LrScheduleOptions o;
  o.kind = parse_lr_schedule(config.get_string("lr_schedule"));
  o.base_lr = config.get_float("lr");
  o.linear_scaling = config.get_string("lr_scaling") == "linear";
  o.base_batch_size = config.get_int("base_batch_size");
  o.global_batch = global_batch;
  o.warmup_epochs = config.get_float("warmup_epochs");
  o.warmup_steps = config.get_int("lr_warmup_steps");
  o.steps_per_epoch = steps_per_epoch;
  o.total_steps = total_steps;
  o.decay_epochs = parse_epoch_list(config.get_string("lr_decay_epochs"), "lr_decay_epochs");
  o.decay_factor = config.get_float("lr_decay_factor");
  o.poly_power = config.get_float("lr_poly_power");
  o.end_lr = config.get_float("lr_end");
  return o;
}

LrSchedule::LrSchedule(LrScheduleOptions options) : options_(std::move(options)) {
  const LrScheduleOptions& o = options_;
  require(std::isfinite(o.base_lr) && o.base_lr >= 0, "lr must be finite and >= 0, got ", o.base_lr);
  if (o.linear_scaling) {
    require(o.base_batch_size > 0, "base_batch_size must be > 0, got ", o.base_batch_size);
    require(o.global_batch > 0, "lr_scaling=linear needs the global batch size (got ", o.global_batch, ")");
    k_ = static_cast<double>(o.global_batch) / static_cast<double>(o.base_batch_size);
  }
  require(o.warmup_epochs >= 0 && o.warmup_steps >= 0, "warmup_epochs and warmup_steps must be >= 0");
  if (o.warmup_steps > 0) {
    warmup_ = static_cast<double>(o.warmup_steps);
  } else if (o.warmup_epochs > 0) {
    require(o.steps_per_epoch > 0, "warmup_epochs=", o.warmup_epochs,
            " needs the number of steps per epoch (unknown for this data source); use lr_warmup_steps instead");
    warmup_ = o.warmup_epochs * static_cast<double>(o.steps_per_epoch);
  }
  switch (o.kind) {
    case LrScheduleKind::kConstant:
      break;
    case LrScheduleKind::kStep:
      require(o.steps_per_epoch > 0,
              "lr_schedule=step needs the number of steps per epoch (unknown for this data source)");
      require(o.decay_factor >= 0 && o.decay_factor <= 1, "lr_decay_factor must be in [0, 1], got ", o.decay_factor);
      break;
    case LrScheduleKind::kPoly:
    case LrScheduleKind::kCosine:
      require(o.total_steps > 0, "lr_schedule=", o.kind == LrScheduleKind::kPoly ? "poly" : "cosine",
              " needs the total number of steps (set num_iter or num_epochs)");
      require(o.poly_power > 0, "lr_poly_power must be > 0, got ", o.poly_power);
      require(o.end_lr >= 0, "lr_end must be >= 0, got ", o.end_lr);
      break;
  }
}

double LrSchedule::decayed(int64_t step) const {
  const LrScheduleOptions& o = options_;
  const double target = target_lr();
  switch (o.kind) {
    case LrScheduleKind::kConstant:
      return target;
    case LrScheduleKind::kStep: {
      const double epoch = static_cast<double>(step) / static_cast<double>(o.steps_per_epoch);
      double lr = target;
      for (double boundary : o.decay_epochs)
        if (epoch >= boundary) lr *= o.decay_factor;
      return lr;
    }
    case LrScheduleKind::kPoly:
    case LrScheduleKind::kCosine: {
      const double span = static_cast<double>(o.total_steps) - warmup_;
      double p = span > 0 ? (static_cast<double>(step) - warmup_) / span : 1.0;
      p = std::clamp(p, 0.0, 1.0);
      const double shape = o.kind == LrScheduleKind::kPoly ? std::pow(1.0 - p, o.poly_power)
                                                           : 0.5 * (1.0 + std::cos(std::numbers::pi * p));
      return o.end_lr + (target - o.end_lr) * shape;
    }
  }
  return target;
}

double LrSchedule::lr_at(int64_t step) const {
  require(step >= 0, "lr schedule: step must be >= 0, got ", step);
  const double s = static_cast<double>(step);
  if (s < warmup_) {
    const double target = target_lr();
    const double start = k_ > 1 ? target / k_ : 0.0;
    return start + (target - start) * (s / warmup_);
  }
  return decayed(step);
}

}  // namespace cohort
