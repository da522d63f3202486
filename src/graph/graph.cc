#include "graph/graph.h"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/status.h"
#include "kernels/philox.h"
#include "tensor/device_api.h"

namespace cohort {

using backend::LayerKind;
using backend::LayerSpec;

Graph::Graph(const Shape& input) {
  if (!(input.size() == 1 || input.size() == 3))
    fail(Code::kInvalidArgument, "the input shape must be {C, H, W} or {F}, got ", shape_string(input));
  for (int64_t d : input)
    if (d <= 0) fail(Code::kInvalidArgument, "the input shape must be positive, got ", shape_string(input));
  LayerSpec l;
  l.kind = LayerKind::kInput;
  l.name = "input";
  l.shape = input;
  spec_.layers.push_back(l);
  names_["input"] = 0;
  backend_ = backend::make_backend(Device::cpu(), 0);
  stream_ = backend_->stream();
}

const LayerSpec& Graph::at(int index, const char* what) const {
  require(index >= 0 && index < num_layers(), what, ": no layer with index ", index, " (the net has ", num_layers(),
          " layers)");
  return spec_.layers[static_cast<size_t>(index)];
}

const Shape& Graph::shape(int layer) const { return at(layer, "shape").shape; }

int Graph::find(const std::string& name) const {
  auto it = names_.find(name);
  return it == names_.end() ? -1 : it->second;
}

void Graph::check_open() const {
  require(!materialized_, "layers cannot be added after the parameters were allocated");
  require(!has_loss(), "the loss must be the last layer; nothing can follow it");
}

void Graph::check_new(const std::string& name) const {
  check_open();
  require(!name.empty(), "a layer needs a name");
  require(names_.count(name) == 0, "layer name '", name, "' is used twice");
}

int Graph::add_layer(LayerSpec l) {
  check_new(l.name);
  for (int in : l.inputs) {
    const LayerSpec& src = at(in, l.name.c_str());
    require(src.kind != LayerKind::kSoftmaxXent, "layer '", l.name, "': a loss cannot feed another layer");
  }
  const int index = num_layers();
  names_[l.name] = index;
  spec_.layers.push_back(std::move(l));
  return index;
}

int Graph::add_param(const std::string& name, const Shape& shape, Parameter::Init init) {
  params_.push_back({name, shape, {}, {}, init});
  spec_.param_shapes.push_back(shape);
  return static_cast<int>(params_.size()) - 1;
}

namespace {

const Shape& image_input(const LayerSpec& src, const std::string& name, const char* kind) {
  if (src.shape.size() != 3)
    fail(Code::kInvalidArgument, "layer '", name, "': ", kind, " needs an image input {C, H, W}, but '", src.name,
         "' gives ", shape_string(src.shape));
  return src.shape;
}

void check_window(const std::string& name, const char* kind, const Shape& in, const backend::Window& w) {
  require(w.kh > 0 && w.kw > 0 && w.sh > 0 && w.sw > 0 && w.dh > 0 && w.dw > 0 && w.ph >= 0 && w.pw >= 0, "layer '",
          name, "': ", kind, " kernel, stride and dilation must be positive and padding non-negative");
  const int64_t eh = static_cast<int64_t>(w.dh) * (w.kh - 1) + 1, ew = static_cast<int64_t>(w.dw) * (w.kw - 1) + 1;
  require(eh <= in[1] + 2 * w.ph && ew <= in[2] + 2 * w.pw, "layer '", name, "': ", kind, " kernel ", eh, "x", ew,
          " is larger than its padded input ", in[1] + 2 * w.ph, "x", in[2] + 2 * w.pw, " (input ", in[1], "x", in[2],
          ", padding ", w.ph, ")");
}

}  // namespace

int Graph::conv(int in, const std::string& name, int out_channels, const ConvOptions& o) {
  check_new(name);
  const Shape& s = image_input(at(in, name.c_str()), name, "conv");
  require(out_channels > 0 && o.groups > 0, "layer '", name, "': conv needs positive out_channels and groups");
  require(s[0] % o.groups == 0 && out_channels % o.groups == 0, "layer '", name, "': channel mismatch: ", s[0],
          " input and ", out_channels, " output channels must both be divisible by groups=", o.groups);
  LayerSpec l;
  l.kind = LayerKind::kConv;
  l.name = name;
  l.inputs = {in};
  l.win = {o.kh, o.kw, o.stride, o.stride, o.pad, o.pad, o.dilation, o.dilation, false};
  check_window(name, "conv", s, l.win);
  l.out_channels = out_channels;
  l.groups = o.groups;
  l.bias = o.bias;
  l.shape = {out_channels, backend::window_out(s[1], o.kh, o.stride, o.pad, o.dilation, false),
             backend::window_out(s[2], o.kw, o.stride, o.pad, o.dilation, false)};
  check_open();
  l.params.push_back(
      add_param(name + ".weight", {out_channels, s[0] / o.groups, o.kh, o.kw}, Parameter::Init::kHeUniform));
  if (o.bias) l.params.push_back(add_param(name + ".bias", {out_channels}, Parameter::Init::kZero));
  return add_layer(std::move(l));
}

int Graph::dense(int in, const std::string& name, int out_features, bool bias) {
  check_new(name);
  const LayerSpec& src = at(in, name.c_str());
  if (src.shape.size() != 1)
    fail(Code::kInvalidArgument, "layer '", name, "': dense needs a flat input {F}, but '", src.name, "' gives ",
         shape_string(src.shape), "; add a flatten layer before it");
  require(out_features > 0, "layer '", name, "': dense needs positive out_features, got ", out_features);
  LayerSpec l;
  l.kind = LayerKind::kDense;
  l.name = name;
  l.inputs = {in};
  l.out_channels = out_features;
  l.bias = bias;
  l.shape = {out_features};
  check_open();
  l.params.push_back(add_param(name + ".weight", {out_features, src.shape[0]}, Parameter::Init::kHeUniform));
  if (bias) l.params.push_back(add_param(name + ".bias", {out_features}, Parameter::Init::kZero));
  return add_layer(std::move(l));
}

int Graph::batch_norm(int in, const std::string& name, float eps, float momentum) {
  check_new(name);
  const LayerSpec& src = at(in, name.c_str());
  require(eps > 0 && momentum >= 0 && momentum <= 1, "layer '", name,
          "': batch norm needs eps > 0 and momentum in [0, 1]");
  LayerSpec l;
  l.kind = LayerKind::kBatchNorm;
  l.name = name;
  l.inputs = {in};
  l.shape = src.shape;
  l.eps = eps;
  l.momentum = momentum;
  const int64_t c = src.shape[0];
  check_open();
  l.params = {add_param(name + ".weight", {c}, Parameter::Init::kOne),
              add_param(name + ".bias", {c}, Parameter::Init::kZero)};
  for (const char* s : {".running_mean", ".running_var"}) {
    states_.push_back({name + s, {c}, {}, {}, Parameter::Init::kZero});
    spec_.state_shapes.push_back({c});
    l.states.push_back(static_cast<int>(states_.size()) - 1);
  }
  return add_layer(std::move(l));
}

int Graph::activation(int in, const std::string& name, ActKind kind, float alpha) {
  LayerSpec l;
  l.kind = LayerKind::kActivation;
  l.name = name;
  l.inputs = {in};
  l.shape = at(in, name.c_str()).shape;
  l.act = kind;
  l.alpha = alpha;
  return add_layer(std::move(l));
}

int Graph::max_pool(int in, const std::string& name, const PoolOptions& o) {
  const Shape& s = image_input(at(in, name.c_str()), name, "max_pool");
  LayerSpec l;
  l.kind = LayerKind::kMaxPool;
  l.name = name;
  l.inputs = {in};
  l.win = {o.kernel, o.kernel, o.stride, o.stride, o.pad, o.pad, 1, 1, o.ceil_mode};
  check_window(name, "pool", s, l.win);
  require(2 * o.pad <= o.kernel, "layer '", name, "': pool padding ", o.pad, " exceeds half the kernel ", o.kernel);
  l.shape = {s[0], backend::window_out(s[1], o.kernel, o.stride, o.pad, 1, o.ceil_mode),
             backend::window_out(s[2], o.kernel, o.stride, o.pad, 1, o.ceil_mode)};
  return add_layer(std::move(l));
}

int Graph::avg_pool(int in, const std::string& name, const PoolOptions& o) {
  const int index = max_pool(in, name, o);
  spec_.layers.back().kind = LayerKind::kAvgPool;
  return index;
}

int Graph::global_avg_pool(int in, const std::string& name) {
  const Shape& s = image_input(at(in, name.c_str()), name, "global_avg_pool");
  LayerSpec l;
  l.kind = LayerKind::kGlobalAvgPool;
  l.name = name;
  l.inputs = {in};
  l.shape = {s[0]};
  return add_layer(std::move(l));
}

int Graph::lrn(int in, const std::string& name, int size, float alpha, float beta, float k) {
  const Shape& s = image_input(at(in, name.c_str()), name, "lrn");
  require(size > 0 && size % 2 == 1, "layer '", name, "': lrn size must be odd and positive, got ", size);
  LayerSpec l;
  l.kind = LayerKind::kLrn;
  l.name = name;
  l.inputs = {in};
  l.shape = s;
  l.lrn_size = size;
  l.lrn_alpha = alpha;
  l.lrn_beta = beta;
  l.lrn_k = k;
  return add_layer(std::move(l));
}

int Graph::dropout(int in, const std::string& name, float p) {
  require(p >= 0.f && p < 1.f, "layer '", name, "': dropout probability must be in [0, 1), got ", p);
  LayerSpec l;
  l.kind = LayerKind::kDropout;
  l.name = name;
  l.inputs = {in};
  l.shape = at(in, name.c_str()).shape;
  l.p = p;
  return add_layer(std::move(l));
}

int Graph::concat(const std::vector<int>& ins, const std::string& name) {
  require(!ins.empty(), "layer '", name, "': concat needs at least one input");
  const Shape& first = image_input(at(ins[0], name.c_str()), name, "concat");
  int64_t c = 0;
  for (int in : ins) {
    const LayerSpec& src = at(in, name.c_str());
    const Shape& s = image_input(src, name, "concat");
    if (!(s[1] == first[1] && s[2] == first[2]))
      fail(Code::kInvalidArgument, "layer '", name, "': concat inputs must agree in height and width: '", src.name,
           "' is ", shape_string(s), ", the first input ", shape_string(first));
    c += s[0];
  }
  LayerSpec l;
  l.kind = LayerKind::kConcat;
  l.name = name;
  l.inputs = ins;
  l.shape = {c, first[1], first[2]};
  return add_layer(std::move(l));
}

int Graph::add(const std::vector<int>& ins, const std::string& name) {
  require(ins.size() >= 2, "layer '", name, "': add needs at least two inputs");
  const LayerSpec& first = at(ins[0], name.c_str());
  for (int in : ins) {
    const LayerSpec& src = at(in, name.c_str());
    if (src.shape != first.shape)
      fail(Code::kInvalidArgument, "layer '", name, "': channel/shape mismatch: '", src.name, "' gives ",
           shape_string(src.shape), " but '", first.name, "' gives ", shape_string(first.shape));
  }
  LayerSpec l;
  l.kind = LayerKind::kAdd;
  l.name = name;
  l.inputs = ins;
  l.shape = first.shape;
  return add_layer(std::move(l));
}

int Graph::flatten(int in, const std::string& name) {
  LayerSpec l;
  l.kind = LayerKind::kFlatten;
  l.name = name;
  l.inputs = {in};
  l.shape = {shape_numel(at(in, name.c_str()).shape)};
  return add_layer(std::move(l));
}

int Graph::shortcut_a(int in, const std::string& name, int out_channels, int stride) {
  const Shape& s = image_input(at(in, name.c_str()), name, "shortcut_a");
  require(out_channels >= s[0] && (out_channels - s[0]) % 2 == 0 && stride >= 1, "layer '", name,
          "': shortcut_a needs out_channels >= ", s[0], " with an even difference and stride >= 1");
  LayerSpec l;
  l.kind = LayerKind::kShortcutA;
  l.name = name;
  l.inputs = {in};
  l.out_channels = out_channels;
  l.win.sh = l.win.sw = stride;
  l.shape = {out_channels, (s[1] + stride - 1) / stride, (s[2] + stride - 1) / stride};
  return add_layer(std::move(l));
}

int Graph::softmax_xent(int in, const std::string& name, float label_smoothing) {
  const LayerSpec& src = at(in, name.c_str());
  if (src.shape.size() != 1)
    fail(Code::kInvalidArgument, "layer '", name, "': the loss needs logits {classes}, but '", src.name, "' gives ",
         shape_string(src.shape));
  require(label_smoothing >= 0.f && label_smoothing < 1.f, "layer '", name,
          "': label smoothing must be in [0, 1), got ", label_smoothing);
  require(in == num_layers() - 1, "layer '", name, "': the loss must follow the last layer");
  LayerSpec l;
  l.kind = LayerKind::kSoftmaxXent;
  l.name = name;
  l.inputs = {in};
  l.label_smoothing = label_smoothing;
  return add_layer(std::move(l));
}

int64_t Graph::num_params() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += shape_numel(p.shape);
  return n;
}

int Graph::output_layer() const { return has_loss() ? num_layers() - 2 : num_layers() - 1; }

std::string Graph::summary() const {
  std::ostringstream out;
  out << std::left << std::setw(28) << "layer" << std::setw(16) << "kind" << std::setw(20) << "output shape"
      << std::right << std::setw(14) << "params"
      << "\n";
  out << std::string(78, '-') << "\n";
  for (const LayerSpec& l : spec_.layers) {
    int64_t n = 0;
    for (int p : l.params) n += shape_numel(params_[static_cast<size_t>(p)].shape);
    std::string kind = backend::layer_kind_name(l.kind);
    if (l.kind == LayerKind::kActivation) kind = backend::act_kind_name(l.act);
    std::string shape = l.kind == LayerKind::kSoftmaxXent ? "[] (loss)" : shape_string(l.shape);
    out << std::left << std::setw(28) << l.name << std::setw(16) << kind << std::setw(20) << shape << std::right
        << std::setw(14) << n << "\n";
  }
  out << std::string(78, '-') << "\n";
  out << "total parameters: " << num_params() << "\n";
  return out.str();
}

namespace {

// Initial values of a parameter, drawn on the host.
void init_values(const Parameter& p, size_t index, uint64_t seed, float* v) {
  const int64_t n = shape_numel(p.shape);
  if (p.init == Parameter::Init::kHeUniform) {
    const int64_t fan_in = n / p.shape[0];
    const float bound = std::sqrt(6.f / static_cast<float>(fan_in));
    for (int64_t j = 0; j < n; ++j) {
      auto r = kernels::philox4x32(static_cast<uint64_t>(j), index, seed);
      v[j] = (2.f * kernels::uniform01(r.v[0]) - 1.f) * bound;
    }
  } else {
    for (int64_t j = 0; j < n; ++j) v[j] = p.init == Parameter::Init::kOne ? 1.f : 0.f;
  }
}

}  // namespace

Tensor Graph::on_device(const Tensor& host) const {
  if (device().is_host()) return host;
  require(allocator_ != nullptr, "the graph computes on ", device().to_string(),
          " but has no allocator for its memory (set_backend)");
  Tensor t = clone_to(host, *allocator_, stream_);
  return t;
}

void Graph::materialize(uint64_t seed) {
  require(!materialized_, "the parameters were already allocated");
  bindings_ = {};
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    Tensor value = Tensor::empty(p.shape, DType::kF32);
    init_values(p, i, seed, value.data_as<float>());
    p.value = on_device(value);
    p.grad = on_device(Tensor::empty(p.shape, DType::kF32));  // zeroed
    bindings_.params.push_back(p.value);
    bindings_.grads.push_back(p.grad);
  }
  for (size_t i = 0; i < states_.size(); ++i) {
    Parameter& s = states_[i];
    Tensor value = Tensor::empty(s.shape, DType::kF32);
    const bool var = s.name.ends_with(".running_var");
    float* v = value.data_as<float>();
    for (int64_t j = 0; j < value.numel(); ++j) v[j] = var ? 1.f : 0.f;
    s.value = on_device(value);
    bindings_.states.push_back(s.value);
  }
  synchronize(stream_);  // the host buffers the copies read go now
  materialized_ = true;
}

void Graph::set_backend(std::shared_ptr<backend::Backend> backend, std::shared_ptr<Allocator> allocator) {
  require(backend != nullptr, "backend is NULL");
  const Device d = backend->device();
  require(d.is_host() || (allocator != nullptr && allocator->device() == d), "backend ", backend->name(),
          " computes on ", d.to_string(), ": pass an allocator of memory on that device");
  const bool moves = materialized_ && !(d == device());
  plans_.clear();  // before their backend goes: its handles and context are theirs
  last_train_ = nullptr;
  backend_ = std::move(backend);
  allocator_ = std::move(allocator);
  stream_ = backend_->stream();
  if (!moves) return;
  // The parameters follow the new device (through host memory).
  auto move = [&](Tensor& t) { t = on_device(to_host(t)); };
  bindings_ = {};
  for (Parameter& p : params_) {
    move(p.value);
    move(p.grad);
    bindings_.params.push_back(p.value);
    bindings_.grads.push_back(p.grad);
  }
  for (Parameter& s : states_) {
    move(s.value);
    bindings_.states.push_back(s.value);
  }
  synchronize(stream_);
}

void Graph::set_precision(backend::Precision precision) {
  if (precision == precision_) return;
  precision_ = precision;
  plans_.clear();
  last_train_ = nullptr;
}

void Graph::set_pointwise_backward(backend::PointwiseBackward mode) {
  if (mode == pointwise_backward_) return;
  pointwise_backward_ = mode;
  plans_.clear();
  last_train_ = nullptr;
}

void Graph::set_loss_scale(float scale) {
  for (auto& [key, plan] : plans_) plan->set_loss_scale(scale);
  loss_scale_ = scale;
}

void Graph::set_profiling(bool on) {
  profiling_ = on;
  profiled_steps_ = 0;
  step_s_ = optimizer_s_ = 0;
  for (auto& [key, plan] : plans_) plan->set_profiling(on);
}

void Graph::record_step(double step_s, double optimizer_s) {
  if (!profiling_) return;
  ++profiled_steps_;
  step_s_ += step_s;
  optimizer_s_ += optimizer_s;
}

Profile Graph::profile() const {
  Profile p;
  p.steps = profiled_steps_;
  p.step_s = step_s_;
  p.optimizer_s = optimizer_s_;
  if (last_train_) p.plan = last_train_->profile();
  for (const LayerSpec& l : spec_.layers) {
    std::string kind = backend::layer_kind_name(l.kind);
    if (l.kind == LayerKind::kActivation) kind = backend::act_kind_name(l.act);
    p.names.push_back(l.name);
    p.kinds.push_back(kind);
  }
  return p;
}

backend::Plan& Graph::plan(int64_t batch, Layout layout, bool training, bool input_grad) {
  require(materialized_, "call materialize() before running the network");
  require(batch > 0, "batch size must be positive, got ", batch);
  auto key = std::make_tuple(batch, static_cast<int>(layout), training, input_grad);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  backend::PlanOptions opt;
  opt.batch = batch;
  opt.layout = layout;
  opt.training = training;
  opt.input_grad = input_grad;
  opt.seed = dropout_seed_;
  opt.precision = precision_;
  opt.pointwise_backward = pointwise_backward_;
  auto plan = backend_->compile(spec_, bindings_, opt);
  if (loss_scale_ != 1.f) plan->set_loss_scale(loss_scale_);
  if (profiling_) plan->set_profiling(true);
  backend::Plan& ref = *plan;
  plans_.emplace(key, std::move(plan));
  return ref;
}

namespace {

// The batch size of an input in `layout`, checked against the graph's input shape.
int64_t batch_of(const Tensor& input, const Shape& sample, Layout layout) {
  require(input.ndim() >= 1 && input.dim(0) > 0, "the input must be a batch [N, ...] with N > 0, got ",
          input.describe());
  Shape want{input.dim(0)};
  if (sample.size() == 3 && layout == Layout::kNHWC)
    want.insert(want.end(), {sample[1], sample[2], sample[0]});
  else
    want.insert(want.end(), sample.begin(), sample.end());
  if (input.shape() != want)
    fail(Code::kInvalidArgument, "the input has shape ", shape_string(input.shape()), " but the network takes ",
         shape_string(want), sample.size() == 3 ? (layout == Layout::kNHWC ? " (NHWC)" : " (NCHW)") : "");
  return input.dim(0);
}

}  // namespace

void Graph::forward(const Tensor& input, Layout layout, const Tensor& labels) {
  require(!has_loss() || (labels.defined() && labels.numel() > 0), "the net ends in a loss: labels are required");
  const int64_t batch = batch_of(input, shape(0), layout);
  backend::Plan& p = plan(batch, layout, true);
  p.forward(input, labels, step_++, stream_);
  last_train_ = &p;
}

float Graph::loss() {
  require(last_train_ != nullptr, "loss needs a forward first");
  return has_loss() ? last_train_->loss() : 0.f;
}

float Graph::forward_train(const Tensor& input, Layout layout, const Tensor& labels) {
  forward(input, layout, labels);
  return loss();
}

int Graph::add_grad_ready(GradReady hook) {
  require(static_cast<bool>(hook), "the gradient-ready hook is empty");
  grad_ready_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

void Graph::remove_grad_ready(int id) {
  std::erase_if(grad_ready_, [id](const auto& h) { return h.first == id; });
}

void Graph::set_grad_ready(GradReady hook) {
  grad_ready_.clear();
  if (hook) add_grad_ready(std::move(hook));
}

void Graph::backward(const Tensor& output_grad) {
  require(last_train_ != nullptr, "backward needs a forward_train first");
  backend::GradReady ready = [this](int i, const Event& e) {
    for (const auto& [id, hook] : grad_ready_) hook(i, params_[static_cast<size_t>(i)], e);
  };
  last_train_->set_ready_enqueues(ready_enqueues_);
  last_train_->backward(output_grad, ready, stream_);
}

void Graph::infer(const Tensor& input, Layout layout, const Tensor& output, int layer) {
  if (layer < 0) layer = output_layer();
  require(at(layer, "infer").kind != LayerKind::kSoftmaxXent, "infer: the loss layer has no tensor output");
  backend::Plan& p = plan(batch_of(input, shape(0), layout), layout, false);
  p.forward(input, Tensor(), 0, stream_);
  p.read(layer, output);
}

float Graph::eval_loss(const Tensor& input, Layout layout, const Tensor& labels) {
  require(has_loss(), "eval_loss: the net has no loss layer");
  require(labels.defined() && labels.numel() > 0, "eval_loss: labels are required");
  backend::Plan& p = plan(batch_of(input, shape(0), layout), layout, false);
  p.forward(input, labels, 0, stream_);
  return p.loss();
}

}  // namespace cohort
