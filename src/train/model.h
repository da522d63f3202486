// A network bound to a runtime, as training and inference use it: the graph with its
// backend, layout and seed, the compute bracket around training passes (which lets the
// runtime's engine hold reductions back while this rank computes), and the one
// gradient-ready hook a trainer or a C caller installs. Models keep their runtime
// alive; the C API's model handle and the Trainer share one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/config.h"
#include "graph/graph.h"
#include "runtime/runtime.h"
#include "tensor/tensor.h"

namespace cohort::train {

// What a model takes and gives: the per-sample input {channels, height, width} ({F}
// inputs: channels = F, height = width = 1) and the length of its output vector.
struct IoShape {
  int64_t channels = 0, height = 1, width = 1, classes = 0;
};

// Holds one rank's forward/backward inside a compute bracket of the engine.
class ComputeBracket {
 public:
  explicit ComputeBracket(comm::Engine& engine) : engine_(engine) { engine_.compute_begin(); }
  ~ComputeBracket() { engine_.compute_end(); }
  ComputeBracket(const ComputeBracket&) = delete;
  ComputeBracket& operator=(const ComputeBracket&) = delete;

 private:
  comm::Engine& engine_;
};

class Model {
 public:
  // A model of the zoo. Options from `config`: num_classes, image_size,
  // label_smoothing, data_format, compute_threads, seed. Throws kInvalidArgument for an
  // unknown name, or when `config` sets the `model` option to another name.
  static std::shared_ptr<Model> from_zoo(std::shared_ptr<Runtime> runtime, const std::string& name,
                                         const Config& config);
  // An empty network of the given per-sample input shape ({C, H, W} or {F}); the caller
  // adds its layers to graph(). Named after the `model` option when it is set, else
  // "custom" (checkpoints carry the name).
  static std::shared_ptr<Model> custom(std::shared_ptr<Runtime> runtime, const Shape& input, const Config& config);

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const { return name_; }
  Runtime& runtime() const { return *runtime_; }
  const std::shared_ptr<Runtime>& runtime_ptr() const { return runtime_; }
  Graph& graph() { return *graph_; }
  const Graph& graph() const { return *graph_; }
  Layout layout() const { return layout_; }
  uint64_t seed() const { return seed_; }
  IoShape io_shape() const;

  // Allocates and initialises the parameters (idempotent).
  void materialize();

  // Where the model computes, and the stream its work is enqueued on.
  Device device() const { return graph_->device(); }
  const Stream& stream() const { return graph_->stream(); }

  // The one gradient-ready hook, called with the parameter index on the thread running
  // backward, once the work that finishes the gradient is enqueued; the gradient is
  // written when `ready` completes (at once on the CPU). Setting it replaces the
  // previous one; returns a token for clear.
  using GradReady = std::function<void(size_t index, const Event& ready)>;
  // `enqueues`: the hook enqueues work of its own on stream() (Graph::
  // set_grad_ready_enqueues).
  uint64_t set_grad_ready(GradReady hook, bool enqueues = false);
  // Removes the hook if `token` still names it.
  void clear_grad_ready(uint64_t token);

  // Throws kInvalidArgument (naming `what`, the expected and the given shape) unless
  // `images` is a compact f32 tensor [N, <input in the model's layout>] in host memory
  // or on the model's device.
  int64_t check_images(const Tensor& images) const;
  // Throws kInvalidArgument unless `labels` is a compact int32 tensor [n] in host
  // memory or on the model's device.
  void check_labels(const Tensor& labels, int64_t n) const;

  // Training forward and backward inside a compute bracket; returns the mean loss.
  // Overwrites every gradient and calls the gradient-ready hook for each. Host batches
  // of a model on a device are copied there first.
  float forward_backward(const Tensor& images, const Tensor& labels);
  // Inference output of the network's last non-loss layer into `output` [N, ...] (host
  // memory or the model's device), complete on return.
  void forward(const Tensor& images, const Tensor& output);
  // Inference loss of a batch.
  float loss(const Tensor& images, const Tensor& labels);

 private:
  Model(std::shared_ptr<Runtime> runtime, std::string name, std::unique_ptr<Graph> graph, const Config& config);
  void require_loss() const;
  // `t` on the model's device: itself when it is there already, else a copy.
  Tensor on_device(const Tensor& t) const;
  // Throws kInvalidArgument naming the first label outside [0, classes) of host labels
  // bound for a device.
  void check_label_values(const Tensor& labels) const;

  std::shared_ptr<Runtime> runtime_;
  std::string name_;
  std::unique_ptr<Graph> graph_;
  Layout layout_ = Layout::kNCHW;
  uint64_t seed_ = 0;
  GradReady grad_ready_;
  uint64_t grad_ready_token_ = 0;
};

}  // namespace cohort::train
