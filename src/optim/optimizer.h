// Optimizers: SGD (plain, momentum, Nesterov), Adam, AdamW and LARS over f32
// parameters on any device. The update math lives in kernels/optim_update.h and runs
// through kernels::for_each on the caller's stream; this class owns the per-parameter
// state (velocities, moments: on the parameter's device) and the step count, and
// exports them as named tensors for checkpoints and for broadcasting from rank 0.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "optim/named_tensor.h"
#include "tensor/device.h"

namespace cohort {

class Config;
namespace kernels {
struct StepValues;
}

enum class OptimizerKind { kSgd, kMomentum, kNesterov, kAdam, kAdamW, kLars };

// "sgd|momentum|nesterov|adam|adamw|lars"; throws kInvalidArgument listing them.
OptimizerKind parse_optimizer_kind(std::string_view name);
std::string_view optimizer_kind_name(OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kMomentum;
  double momentum = 0.9;       // momentum, nesterov, lars (plain sgd ignores it)
  double weight_decay = 1e-4;  // L2 (sgd, adam, lars) or decoupled (adamw)
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double lars_eta = 0.001;
  // LARS: 1-D parameters (biases, batch-norm scale/shift) take the global lr and no
  // weight decay, as in the LARS reference implementations.
  bool lars_exclude_1d = true;

  // From the option registry keys optimizer, momentum, weight_decay, adam_beta1,
  // adam_beta2, adam_epsilon, lars_eta.
  static OptimizerOptions from_config(const Config& config);
};

class Optimizer {
 public:
  explicit Optimizer(OptimizerOptions options);

  // Updates every parameter in place from its gradient with learning rate `lr`, then
  // counts one step. Parameters and gradients must be contiguous f32 tensors of equal
  // shape on one device, with unique names; the updates are enqueued on `stream` (a
  // stream of that device; on the host its threads split the work). State is created
  // (zero) on first sight of a name, on the parameter's device. LARS reads its norms
  // back, so with a device stream the call waits for the work before the LARS updates.
  // Steps on different streams share the state: the caller orders them.
  void step(std::span<const ParamGrad> params, double lr, const Stream& stream = {});

  // step() with the step's values (lr, Adam's bias corrections, the loss scale) read
  // from memory the optimizer keeps on the parameters' device (kernels::StepValues), so
  // that one graph captured on the first call (tensor/device_api.h capture_graph)
  // replays every later step of the same list where the device keeps graphs (CUDA);
  // elsewhere the same work is enqueued each call. With `unscale`, every gradient is
  // first divided by the loss scale (multiplied by inv_scale) and the update changes
  // nothing when any result is inf or NaN: decided on the device, with no read between
  // the two. Returns whether the step was taken (counted), from one read back after the
  // update (none without `unscale`). Not LARS, which reads its norms on the host between
  // the passes. A capture that fails turns graphs off for this optimizer, which then
  // enqueues each step; a list unlike the last call's (other names, memory or state, as
  // after import_state) is captured anew. As with step(), a call on another stream than
  // the last one's must come after that stream's work (the caller orders them): the
  // step's values are written for each call into the one buffer the last update reads.
  bool step_captured(std::span<const ParamGrad> params, double lr, const Stream& stream, bool unscale = false,
                     double inv_scale = 1.0);
  // Whether step_captured replays a graph (false before its first call, on the host,
  // and once a capture failed).
  bool replays_update() const { return update_graph_ != nullptr; }

  // Creates zero state for parameters not seen yet, so that export_state() lists the
  // full state before the first step (for a broadcast from rank 0).
  void init_state(std::span<const ParamGrad> params, const Stream& stream = {});

  // The state as named tensors, sorted by name: "step" (i64[1]) and one or two
  // tensors per parameter, "<param>/velocity" (momentum kinds) or "<param>/adam_m" and
  // "<param>/adam_v". The tensors are views of the live state: writing into them (a
  // broadcast) changes the optimizer; copy them to keep a snapshot across steps.
  std::vector<NamedTensor> export_state() const;

  // Replaces the state with copies of `state` (as export_state() wrote it; host or
  // device tensors: each moves to its parameter's device when next used). Throws
  // kInvalidArgument naming the entry when a name does not belong to this kind of
  // optimizer, a dtype is wrong, "step" is missing, or a shape disagrees with a
  // parameter already known. Shapes are checked against parameters again at step().
  void import_state(std::span<const NamedTensor> state);

  int64_t steps() const { return steps_; }
  // Sets the step count (Adam's bias correction depends on it); for a broadcast of the
  // state from another rank.
  void set_steps(int64_t steps);
  const OptimizerOptions& options() const { return options_; }

  // The state suffixes this kind keeps per parameter ("velocity"; "adam_m", "adam_v").
  std::vector<std::string_view> state_suffixes() const;

 private:
  Tensor& state_for(const ParamGrad& p, std::string_view suffix, const Stream& stream);
  // Whether `params` name the parameters of checked_ in its order, with their shapes and
  // device: their state is then where checked_ says (a training loop passes the same
  // list every step, and the lookups by name cost microseconds a parameter).
  bool same_as_checked(std::span<const ParamGrad> params) const;
  void remember_checked(std::span<const ParamGrad> params, const Stream& stream);
  // The updates, with lr or, where `values` is set, the values it points at.
  void update(std::span<const ParamGrad> params, double lr, const Stream& stream,
              const kernels::StepValues* values = nullptr);
  void check_list(std::span<const ParamGrad> params, const Stream& stream);
  // The unscale (with `unscale`) and the update of step_captured, reading step_values_.
  void enqueue_captured(std::span<const ParamGrad> params, bool unscale, const Stream& stream);
  bool overflowed(const Stream& stream) const;
  // ‖w‖ at 2·k and ‖∇w‖ at 2·k + 1 for each parameter k that `wanted` marks (0 for the
  // others): one list pass, one read-back.
  std::vector<double> norms(std::span<const ParamGrad> params, const std::vector<char>& wanted,
                            const Stream& stream) const;

  struct Checked {
    std::string name;
    Shape shape;
    Device device;
    float* state[2];  // state_suffixes()' tensors, in that order
  };
  // The parameters' and gradients' memory the update graph was captured with, and
  // whether a list's is that (compared in place: no allocation each step).
  std::vector<const void*> graph_memory(std::span<const ParamGrad> params) const;
  bool captured_with(std::span<const ParamGrad> params) const;

  OptimizerOptions options_;
  int64_t steps_ = 0;
  std::map<std::string, Tensor, std::less<>> state_;  // "<param>/<suffix>" → f32 tensor
  std::vector<Checked> checked_;  // the last step's parameters; emptied where a state's buffer changes
                                  // (import_state, a state moved to its parameter's device)
  // step_captured: the step's values on the parameters' device, the graph (dropped with
  // checked_, and where the list's memory or the unscale differ from its capture).
  Tensor step_values_;
  std::shared_ptr<void> update_graph_;
  std::vector<const void*> graph_memory_;
  bool graph_unscale_ = false;
  bool graphs_off_ = false;
  void forget_graph();
};

}  // namespace cohort
