#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "core/config.h"
#include "core/logging.h"
#include "core/status.h"
#include "kernels/for_each.h"
#include "kernels/optim_update.h"
#include "tensor/device_api.h"

namespace cohort {
namespace {

constexpr std::string_view kStepName = "step";
constexpr std::string_view kVelocity = "velocity";
constexpr std::string_view kAdamM = "adam_m";
constexpr std::string_view kAdamV = "adam_v";
// The arguments a functor reads from kernels::StepValues instead: NaN, which would show.
constexpr float kNotRead = std::numeric_limits<float>::quiet_NaN();

struct KindName {
  OptimizerKind kind;
  std::string_view name;
};
constexpr KindName kKinds[] = {{OptimizerKind::kSgd, "sgd"},           {OptimizerKind::kMomentum, "momentum"},
                               {OptimizerKind::kNesterov, "nesterov"}, {OptimizerKind::kAdam, "adam"},
                               {OptimizerKind::kAdamW, "adamw"},       {OptimizerKind::kLars, "lars"}};

void check_param(const ParamGrad& p, const Stream& stream) {
  require(!p.name.empty(), "optimizer: a parameter has an empty name");
  const Tensor& w = p.param;
  const Tensor& g = p.grad;
  if (!(w.dtype() == DType::kF32 && g.dtype() == DType::kF32))
    fail(Code::kInvalidArgument, "optimizer: parameter '", p.name, "' and its gradient must be f32 (got ", w.describe(),
         " and ", g.describe(), ")");
  if (!(w.device() == g.device()))
    fail(Code::kInvalidArgument, "optimizer: parameter '", p.name, "' is ", w.describe(), " but its gradient is ",
         g.describe(), ": both must be on one device");
  if (!(w.device().is_host() ? stream.is_host() : stream.device() == w.device()))
    fail(Code::kInvalidArgument, "optimizer: parameter '", p.name, "' is ", w.describe(),
         " but the update was asked to run on a stream of ", stream.device().to_string());
  if (w.shape() != g.shape())
    fail(Code::kInvalidArgument, "optimizer: gradient of '", p.name, "' has shape ", shape_string(g.shape()),
         ", parameter has ", shape_string(w.shape()));
  require(w.is_contiguous() && g.is_contiguous(), "optimizer: parameter '", p.name,
          "' and its gradient must be contiguous");
  require(w.numel() == 0 || (w.data() != nullptr && g.data() != nullptr), "optimizer: parameter '", p.name,
          "' has no data");
}

void check_unique(std::span<const ParamGrad> params) {
  std::set<std::string_view> seen;
  for (const ParamGrad& p : params)
    require(seen.insert(p.name).second, "optimizer: parameter name '", p.name, "' appears twice");
}

}  // namespace

Tensor clone_host(const Tensor& t) {
  if (!t.is_contiguous()) fail(Code::kInvalidArgument, "clone_host: ", t.describe(), " is not contiguous");
  return to_host(t);
}

OptimizerKind parse_optimizer_kind(std::string_view name) {
  for (const KindName& k : kKinds)
    if (k.name == name) return k.kind;
  fail(Code::kInvalidArgument, "unknown optimizer '", name, "'; expected one of sgd|momentum|nesterov|adam|adamw|lars");
}

std::string_view optimizer_kind_name(OptimizerKind kind) {
  for (const KindName& k : kKinds)
    if (k.kind == kind) return k.name;
  return "?";
}

OptimizerOptions OptimizerOptions::from_config(const Config& config) {
  OptimizerOptions o;
  o.kind = parse_optimizer_kind(config.get_string("optimizer"));
  o.momentum = config.get_float("momentum");
  o.weight_decay = config.get_float("weight_decay");
  o.beta1 = config.get_float("adam_beta1");
  o.beta2 = config.get_float("adam_beta2");
  o.epsilon = config.get_float("adam_epsilon");
  o.lars_eta = config.get_float("lars_eta");
  return o;
}

Optimizer::Optimizer(OptimizerOptions options) : options_(options) {
  require(options_.momentum >= 0 && options_.momentum < 1, "optimizer: momentum must be in [0, 1), got ",
          options_.momentum);
  require(options_.weight_decay >= 0, "optimizer: weight_decay must be >= 0, got ", options_.weight_decay);
  require(options_.beta1 >= 0 && options_.beta1 < 1, "optimizer: adam_beta1 must be in [0, 1), got ", options_.beta1);
  require(options_.beta2 >= 0 && options_.beta2 < 1, "optimizer: adam_beta2 must be in [0, 1), got ", options_.beta2);
  require(options_.epsilon >= 0, "optimizer: adam_epsilon must be >= 0, got ", options_.epsilon);
  require(options_.lars_eta > 0, "optimizer: lars_eta must be > 0, got ", options_.lars_eta);
}

std::vector<std::string_view> Optimizer::state_suffixes() const {
  switch (options_.kind) {
    case OptimizerKind::kSgd:
      return {};
    case OptimizerKind::kMomentum:
    case OptimizerKind::kNesterov:
    case OptimizerKind::kLars:
      return {kVelocity};
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return {kAdamM, kAdamV};
  }
  return {};
}

Tensor& Optimizer::state_for(const ParamGrad& p, std::string_view suffix, const Stream& stream) {
  std::string key = cat(p.name, "/", suffix);
  auto it = state_.find(key);
  if (it == state_.end()) {
    Tensor fresh = Tensor::empty_like(p.param, stream);
    zero(fresh, stream);
    it = state_.emplace(key, fresh).first;
  } else if (it->second.shape() != p.param.shape()) {
    fail(Code::kInvalidArgument, "optimizer: state '", key, "' has shape ", shape_string(it->second.shape()),
         " but parameter '", p.name, "' has shape ", shape_string(p.param.shape()),
         " (state imported for another model?)");
  } else if (!(it->second.device() == p.param.device())) {
    // Imported on another device (a checkpoint is read into host memory).
    Tensor moved = Tensor::empty_like(p.param, stream);
    copy(moved, it->second, stream);
    it->second = moved;
    checked_.clear();  // it may hold the buffer just released
    forget_graph();
  }
  return it->second;
}

void Optimizer::init_state(std::span<const ParamGrad> params, const Stream& stream) {
  check_unique(params);
  for (const ParamGrad& p : params) {
    check_param(p, stream);
    for (std::string_view s : state_suffixes()) state_for(p, s, stream);
  }
}

void Optimizer::check_list(std::span<const ParamGrad> params, const Stream& stream) {
  // Everything is validated before any parameter changes; the names' uniqueness and
  // the state's lookups only for a list unlike the last step's.
  if (same_as_checked(params)) {
    for (const ParamGrad& p : params) check_param(p, stream);
  } else {
    init_state(params, stream);
    remember_checked(params, stream);
  }
}

void Optimizer::step(std::span<const ParamGrad> params, double lr, const Stream& stream) {
  require(std::isfinite(lr) && lr >= 0, "optimizer: learning rate must be finite and >= 0, got ", lr);
  check_list(params, stream);
  update(params, lr, stream);
  ++steps_;
}

void Optimizer::forget_graph() {
  update_graph_.reset();
  graph_memory_.clear();
}

std::vector<const void*> Optimizer::graph_memory(std::span<const ParamGrad> params) const {
  std::vector<const void*> m;
  m.reserve(2 * params.size() + 1);
  for (const ParamGrad& p : params) {
    m.push_back(p.param.data());
    m.push_back(p.grad.data());
  }
  m.push_back(step_values_.data());
  return m;
}

bool Optimizer::captured_with(std::span<const ParamGrad> params) const {
  if (graph_memory_.size() != 2 * params.size() + 1 || graph_memory_.back() != step_values_.data()) return false;
  for (size_t i = 0; i < params.size(); ++i)
    if (graph_memory_[2 * i] != params[i].param.data() || graph_memory_[2 * i + 1] != params[i].grad.data())
      return false;
  return true;
}

bool Optimizer::step_captured(std::span<const ParamGrad> params, double lr, const Stream& stream, bool unscale,
                              double inv_scale) {
  require(options_.kind != OptimizerKind::kLars,
          "optimizer: LARS reads its norms on the host between passes; its update cannot be captured (use step)");
  require(std::isfinite(lr) && lr >= 0, "optimizer: learning rate must be finite and >= 0, got ", lr);
  require(std::isfinite(inv_scale) && inv_scale > 0, "optimizer: the loss scale's inverse must be finite and > 0, got ",
          inv_scale);
  check_list(params, stream);
  if (params.empty()) {
    ++steps_;
    return true;
  }
  static_assert(sizeof(kernels::StepValues) == 5 * sizeof(int32_t));
  const Tensor& first = params.front().param;
  if (step_values_.data() == nullptr || !(step_values_.device() == first.device())) {
    step_values_ = Tensor::empty_like(first, {5}, DType::kI32, stream);
    forget_graph();
  }
  auto* values = static_cast<kernels::StepValues*>(step_values_.data());
  const double t = static_cast<double>(steps_ + 1);
  const kernels::StepValues v{static_cast<float>(lr), static_cast<float>(1.0 - std::pow(options_.beta1, t)),
                              static_cast<float>(1.0 - std::pow(options_.beta2, t)), static_cast<float>(inv_scale), 0u};
  kernels::for_each(stream, 1, kernels::SetStepValues{v}, values);
  if (update_graph_ && (graph_unscale_ != unscale || !captured_with(params))) forget_graph();
  if (!update_graph_ && !graphs_off_ && !stream.is_host()) {
    try {
      update_graph_ = capture_graph(stream, [&] { enqueue_captured(params, unscale, stream); });
      graph_unscale_ = unscale;
      graph_memory_ = graph_memory(params);
    } catch (const Error& e) {
      graphs_off_ = true;
      COHORT_LOG_WARN("the optimizer's update is enqueued step by step: its capture failed (", e.what(), ")");
    }
  }
  if (update_graph_)
    launch_graph(update_graph_, stream);
  else
    enqueue_captured(params, unscale, stream);
  if (unscale && overflowed(stream)) return false;  // without unscaling the count stays 0: no read
  ++steps_;
  return true;
}

// The count of non-finite unscaled gradients, once the work before it is done: read
// directly on the host, copied back (waiting for the stream) from a device.
bool Optimizer::overflowed(const Stream& stream) const {
  auto* values = static_cast<kernels::StepValues*>(step_values_.data());
  if (stream.is_host()) return values->nonfinite != 0;
  const Tensor count = Tensor::wrap(&values->nonfinite, {1}, DType::kI32, step_values_.device());
  return *to_host(count, stream).data_as<int32_t>() != 0;
}

void Optimizer::enqueue_captured(std::span<const ParamGrad> params, bool unscale, const Stream& stream) {
  auto* values = static_cast<kernels::StepValues*>(step_values_.data());
  if (unscale) {
    std::vector<kernels::ReduceItem<kernels::UnscaleCount>> items;
    items.reserve(params.size());
    for (const ParamGrad& p : params)
      items.push_back({p.grad.numel(), kernels::UnscaleCount{p.grad.data_as<float>(), kNotRead, values}});
    kernels::reduce_list_into<uint32_t>(stream, items, kernels::Plus{}, &values->nonfinite);
  }
  update(params, kNotRead, stream, values);
}

bool Optimizer::same_as_checked(std::span<const ParamGrad> params) const {
  if (params.size() != checked_.size()) return false;
  for (size_t k = 0; k < params.size(); ++k) {
    const Checked& c = checked_[k];
    if (params[k].name != c.name || params[k].param.shape() != c.shape || !(params[k].param.device() == c.device))
      return false;
  }
  return true;
}

void Optimizer::remember_checked(std::span<const ParamGrad> params, const Stream& stream) {
  const std::vector<std::string_view> suffixes = state_suffixes();
  std::vector<Checked> checked;  // assigned last: state_for empties checked_ when it moves a state
  for (const ParamGrad& p : params) {
    Checked c{p.name, p.param.shape(), p.param.device(), {nullptr, nullptr}};
    for (size_t s = 0; s < suffixes.size(); ++s) c.state[s] = state_for(p, suffixes[s], stream).data_as<float>();
    checked.push_back(std::move(c));
  }
  checked_ = std::move(checked);
  forget_graph();  // captured with the last list's state
}

std::vector<double> Optimizer::norms(std::span<const ParamGrad> params, const std::vector<char>& wanted,
                                     const Stream& stream) const {
  const size_t n = params.size();
  std::vector<double> sums(2 * n, 0.0);
  if (std::find(wanted.begin(), wanted.end(), 1) == wanted.end()) return sums;  // nothing to read back
  double* out = sums.data();
  Tensor on_device;  // the sums, where the stream is a device's
  if (!stream.is_host() && n > 0) {
    on_device = Tensor::empty_like(params.front().grad, {static_cast<int64_t>(2 * n)}, DType::kF64, stream);
    zero(on_device, stream);
    out = on_device.data_as<double>();
  }
  std::vector<kernels::ReduceToItem<double, kernels::SquareF64>> items;
  for (size_t k = 0; k < n; ++k) {
    if (!wanted[k]) continue;
    items.push_back({params[k].param.numel(), {params[k].param.data_as<float>()}, out + 2 * k});
    items.push_back({params[k].grad.numel(), {params[k].grad.data_as<float>()}, out + 2 * k + 1});
  }
  kernels::reduce_each_into(stream, items, kernels::Plus{});
  if (out != sums.data()) std::copy_n(to_host(on_device, stream).data_as<double>(), 2 * n, sums.begin());
  for (double& s : sums) s = std::sqrt(s);
  return sums;
}

// Every parameter's update as one list pass (kernels::for_each_list: a few launches on a
// GPU, not one per tensor); each state as checked_ has it (step() made it match).
void Optimizer::update(std::span<const ParamGrad> params, double lr, const Stream& stream,
                       const kernels::StepValues* values) {
  const auto& o = options_;
  auto w = [](const ParamGrad& p) { return p.param.data_as<float>(); };
  auto g = [](const ParamGrad& p) { return static_cast<const float*>(p.grad.data_as<float>()); };
  auto state = [&](size_t k, int s) { return checked_[k].state[s]; };
  switch (o.kind) {
    case OptimizerKind::kSgd:
    case OptimizerKind::kMomentum:
    case OptimizerKind::kNesterov: {
      const bool momentum = o.kind != OptimizerKind::kSgd;
      const kernels::SgdUpdate f{static_cast<float>(lr), momentum ? static_cast<float>(o.momentum) : 0.0f,
                                 static_cast<float>(o.weight_decay), o.kind == OptimizerKind::kNesterov, values};
      std::vector<kernels::ForEachItem<kernels::SgdUpdate, float*, const float*, float*>> items;
      for (size_t k = 0; k < params.size(); ++k)
        items.push_back({params[k].param.numel(), f, {w(params[k]), g(params[k]), momentum ? state(k, 0) : nullptr}});
      kernels::for_each_list(stream, items);
      return;
    }
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: {
      const double t = static_cast<double>(steps_ + 1);
      const kernels::AdamUpdate f{static_cast<float>(lr),
                                  static_cast<float>(o.beta1),
                                  static_cast<float>(o.beta2),
                                  static_cast<float>(o.epsilon),
                                  static_cast<float>(o.weight_decay),
                                  o.kind == OptimizerKind::kAdamW,
                                  values ? kNotRead : static_cast<float>(1.0 - std::pow(o.beta1, t)),
                                  values ? kNotRead : static_cast<float>(1.0 - std::pow(o.beta2, t)),
                                  values};
      std::vector<kernels::ForEachItem<kernels::AdamUpdate, float*, const float*, float*, float*>> items;
      for (size_t k = 0; k < params.size(); ++k)
        items.push_back({params[k].param.numel(), f, {w(params[k]), g(params[k]), state(k, 0), state(k, 1)}});
      kernels::for_each_list(stream, items);
      return;
    }
    case OptimizerKind::kLars: {
      // Every trust ratio from the parameters and gradients as they are (all norms in
      // one pass), then the updates.
      std::vector<char> adapted;
      for (const ParamGrad& p : params) adapted.push_back(!(o.lars_exclude_1d && p.param.ndim() <= 1));
      const std::vector<double> norm = norms(params, adapted, stream);
      std::vector<kernels::ForEachItem<kernels::LarsUpdate, float*, const float*, float*>> items;
      for (size_t k = 0; k < params.size(); ++k) {
        const ParamGrad& p = params[k];
        const double wd = adapted[k] ? o.weight_decay : 0.0;
        const double trust = adapted[k] ? kernels::lars_trust_ratio(norm[2 * k], norm[2 * k + 1], o.lars_eta, wd) : 1.0;
        items.push_back({p.param.numel(),
                         kernels::LarsUpdate{static_cast<float>(lr * trust), static_cast<float>(o.momentum),
                                             static_cast<float>(wd)},
                         {w(p), g(p), state(k, 0)}});
      }
      kernels::for_each_list(stream, items);
      return;
    }
  }
}

void Optimizer::set_steps(int64_t steps) {
  require(steps >= 0, "optimizer: step count must be >= 0, got ", steps);
  steps_ = steps;
}

std::vector<NamedTensor> Optimizer::export_state() const {
  std::vector<NamedTensor> out;
  Tensor step = Tensor::empty({1}, DType::kI64);
  *step.data_as<int64_t>() = steps_;
  out.push_back({std::string(kStepName), step});
  for (const auto& [name, t] : state_) out.push_back({name, t});
  std::sort(out.begin(), out.end(), [](const NamedTensor& a, const NamedTensor& b) { return a.name < b.name; });
  return out;
}

void Optimizer::import_state(std::span<const NamedTensor> state) {
  const std::vector<std::string_view> suffixes = state_suffixes();
  std::map<std::string, Tensor, std::less<>> fresh;
  int64_t steps = -1;
  for (const NamedTensor& e : state) {
    if (e.name == kStepName) {
      if (!(e.tensor.dtype() == DType::kI64 && e.tensor.numel() == 1 && e.tensor.device().is_host()))
        fail(Code::kInvalidArgument, "optimizer state: 'step' must be one i64 on the host, got ", e.tensor.describe());
      steps = *e.tensor.data_as<int64_t>();
      require(steps >= 0, "optimizer state: 'step' is negative (", steps, ")");
      continue;
    }
    size_t slash = e.name.rfind('/');
    std::string_view suffix =
        slash == std::string::npos ? std::string_view() : std::string_view(e.name).substr(slash + 1);
    bool known = false;
    for (std::string_view s : suffixes) known = known || s == suffix;
    require(known && slash > 0, "optimizer state: entry '", e.name, "' does not belong to a ",
            optimizer_kind_name(options_.kind), " optimizer (saved by another optimizer?)");
    if (e.tensor.dtype() != DType::kF32)
      fail(Code::kInvalidArgument, "optimizer state: '", e.name, "' must be f32, got ", e.tensor.describe());
    require(e.tensor.is_contiguous(), "optimizer state: '", e.name, "' must be contiguous, got ", e.tensor.describe());
    auto old = state_.find(e.name);
    if (!(old == state_.end() || old->second.shape() == e.tensor.shape()))
      fail(Code::kInvalidArgument, "optimizer state: '", e.name, "' has shape ", shape_string(e.tensor.shape()),
           ", expected ", old == state_.end() ? std::string() : shape_string(old->second.shape()));
    require(fresh.emplace(e.name, clone_host(e.tensor)).second, "optimizer state: entry '", e.name, "' appears twice");
  }
  require(steps >= 0, "optimizer state: the 'step' entry is missing");
  state_ = std::move(fresh);
  checked_.clear();  // its pointers were into the old state
  forget_graph();
  steps_ = steps;
}

}  // namespace cohort
