// A network as a DAG of layers: a builder that infers shapes (no memory is
// allocated while building, so counting a model's parameters is cheap), the
// parameter + gradient registry (stable names, plain layouts: OIHW, [out, in], [C],
// f32 tensors on the backend's device), and execution through a backend Plan,
// compiled once per (batch, layout, mode) and reused for every step. Work is enqueued
// on the backend's stream (inline on the CPU). A gradient-ready hook fires for each
// parameter as soon as backward has enqueued the work that finishes it, with the
// event after which the gradient is written.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/net_spec.h"
#include "backend/precision.h"
#include "graph/profile.h"
#include "tensor/allocator.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace cohort {

using backend::ActKind;
using backend::Layout;

struct ConvOptions {
  int kh = 3, kw = 3;
  int stride = 1, pad = 0, dilation = 1, groups = 1;
  bool bias = true;
};

struct PoolOptions {
  int kernel = 2, stride = 2, pad = 0;
  bool ceil_mode = false;
};

struct Parameter {
  enum class Init { kHeUniform, kZero, kOne };
  std::string name;    // "layer1.0.conv1.weight"
  Shape shape;         // plain layout
  Tensor value, grad;  // allocated by Graph::materialize(), on the backend's device
  Init init = Init::kHeUniform;
};

class Graph {
 public:
  // input: per-sample shape, {C, H, W} (images) or {F} (feature vectors).
  explicit Graph(const Shape& input);
  int input() const { return 0; }

  // Builders return the new layer's index. Names must be unique; bad shapes (kernel
  // larger than the padded input, channel mismatch, ...) throw kInvalidArgument
  // naming the layer.
  int conv(int in, const std::string& name, int out_channels, const ConvOptions& o);
  int dense(int in, const std::string& name, int out_features, bool bias = true);
  int batch_norm(int in, const std::string& name, float eps = 1e-5f, float momentum = 0.1f);
  int activation(int in, const std::string& name, ActKind kind, float alpha = 0.f);
  int relu(int in, const std::string& name) { return activation(in, name, ActKind::kRelu); }
  int max_pool(int in, const std::string& name, const PoolOptions& o);
  int avg_pool(int in, const std::string& name, const PoolOptions& o);
  int global_avg_pool(int in, const std::string& name);  // {C, H, W} → {C}
  int lrn(int in, const std::string& name, int size, float alpha, float beta, float k);
  int dropout(int in, const std::string& name, float p);
  int concat(const std::vector<int>& ins, const std::string& name);  // along channels
  int add(const std::vector<int>& ins, const std::string& name);
  int flatten(int in, const std::string& name);
  int shortcut_a(int in, const std::string& name, int out_channels, int stride);
  int softmax_xent(int in, const std::string& name, float label_smoothing = 0.f);

  const backend::NetSpec& spec() const { return spec_; }
  int num_layers() const { return static_cast<int>(spec_.layers.size()); }
  const Shape& shape(int layer) const;
  int find(const std::string& name) const;  // -1 when absent
  bool has_loss() const { return spec_.has_loss(); }
  int64_t num_params() const;  // elements of all parameters
  const std::vector<Parameter>& params() const { return params_; }
  std::vector<Parameter>& params() { return params_; }
  // Running statistics (batch norm), named like parameters.
  const std::vector<Parameter>& states() const { return states_; }
  // A table: layer, kind, output shape, parameters.
  std::string summary() const;

  // ---- execution ----
  // Allocates and initializes parameters (He-uniform weights, zero biases, unit
  // scales) from `seed`, on the backend's device (values drawn on the host, then
  // copied), with zero gradients. Adding layers afterwards is an error.
  void materialize(uint64_t seed);
  bool materialized() const { return materialized_; }
  // The backend plans are compiled by (the CPU's by default), and the allocator of
  // parameter memory on its device (host memory when null; required for a device
  // backend). Parameters already allocated move to the new device.
  void set_backend(std::shared_ptr<backend::Backend> backend, std::shared_ptr<Allocator> allocator = nullptr);
  const backend::Backend& backend() const { return *backend_; }
  Device device() const { return backend_->device(); }
  // The stream work is enqueued on (the backend's).
  const Stream& stream() const { return stream_; }
  // The precision layers compute in (backend/precision.h); parameters, gradients and
  // running statistics stay f32. Plans compiled for another precision are dropped.
  void set_precision(backend::Precision precision);
  backend::Precision precision() const { return precision_; }
  // How the CPU backend computes the backward of its 1x1 convolutions (the option
  // cpu_pointwise_backward). Plans compiled with another choice are dropped.
  void set_pointwise_backward(backend::PointwiseBackward mode);
  // Multiplies the loss gradient backward starts from (loss scaling; 1 = none).
  void set_loss_scale(float scale);
  void set_dropout_seed(uint64_t seed) { dropout_seed_ = seed; }
  // The step number the next forward_train uses (it picks the dropout masks).
  void set_step(uint64_t step) { step_ = step; }
  uint64_t step() const { return step_; }
  // Hooks called with the parameter index as soon as the work that finishes its
  // gradient is enqueued (in backward order, on the thread running backward); the
  // gradient is written once `ready` completes (at once on the CPU). add_grad_ready()
  // keeps the hooks already there (the C API's callback is one); set_grad_ready()
  // replaces them all.
  using GradReady = std::function<void(int index, const Parameter& param, const Event& ready)>;
  int add_grad_ready(GradReady hook);  // returns an id for remove_grad_ready()
  void remove_grad_ready(int id);
  void set_grad_ready(GradReady hook);
  // Whether a hook enqueues work of its own on the graph's stream (backend::Plan::
  // set_ready_enqueues). With CUDA graphs a plan records the same event for a parameter
  // every pass: a hook that waits for it does so before the next backward.
  void set_grad_ready_enqueues(bool enqueues) { ready_enqueues_ = enqueues; }
  bool grad_ready_enqueues() const { return ready_enqueues_; }

  // Inputs are f32 [N, ...] batches in `layout` and i32 [N] labels, contiguous, on the
  // backend's device (the Model stages host batches for a device).
  // Training forward (dropout on, batch statistics); enqueued, so loss() waits for it.
  void forward(const Tensor& input, Layout layout, const Tensor& labels);
  // The mean loss of the last training forward (nets ending in a loss); waits for it.
  float loss();
  // forward(), then loss() (0 without a loss layer).
  float forward_train(const Tensor& input, Layout layout, const Tensor& labels);
  // Backward of the last forward; output_grad is needed when there is no loss.
  void backward(const Tensor& output_grad = {});
  // Inference: writes layer `layer`'s output (default: the last non-loss layer) into
  // `output` (host or device memory), complete on return.
  void infer(const Tensor& input, Layout layout, const Tensor& output, int layer = -1);
  // The inference loss of a batch (nets ending in a loss).
  float eval_loss(const Tensor& input, Layout layout, const Tensor& labels);
  // The training plan used last (tests read intermediate values through it).
  backend::Plan& plan(int64_t batch, Layout layout, bool training, bool input_grad = false);
  int output_layer() const;

  // ---- profile ----
  // Starts (from zero) or stops timing forward and backward per layer. The caller of
  // the training step adds each profiled step's measured time and optimizer time.
  void set_profiling(bool on);
  bool profiling() const { return profiling_; }
  void record_step(double step_s, double optimizer_s);
  // The per-layer table of the training plan used last (graph/profile.h).
  Profile profile() const;

 private:
  int add_layer(backend::LayerSpec l);
  int add_param(const std::string& name, const Shape& shape, Parameter::Init init);
  const backend::LayerSpec& at(int index, const char* what) const;
  void check_open() const;
  void check_new(const std::string& name) const;
  // A copy of host tensor `host` on the backend's device (host itself on the CPU).
  Tensor on_device(const Tensor& host) const;

  backend::NetSpec spec_;
  std::vector<Parameter> params_, states_;
  std::map<std::string, int> names_;
  bool materialized_ = false;
  std::shared_ptr<backend::Backend> backend_;
  std::shared_ptr<Allocator> allocator_;  // parameter memory (null: host)
  Stream stream_;
  backend::Bindings bindings_;
  std::map<std::tuple<int64_t, int, bool, bool>, std::unique_ptr<backend::Plan>> plans_;
  backend::Plan* last_train_ = nullptr;
  backend::Precision precision_ = backend::Precision::kF32;
  backend::PointwiseBackward pointwise_backward_ = backend::PointwiseBackward::kAuto;
  float loss_scale_ = 1.f;
  bool profiling_ = false;
  int64_t profiled_steps_ = 0;
  double step_s_ = 0, optimizer_s_ = 0;
  uint64_t step_ = 0, dropout_seed_ = 0;
  std::vector<std::pair<int, GradReady>> grad_ready_;
  bool ready_enqueues_ = false;
  int next_hook_ = 0;
};

}  // namespace cohort
