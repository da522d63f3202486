// The Backend interface: a device that compiles a NetSpec for one batch size and
// layout into a Plan, which runs forward and backward with every primitive and
// buffer created once. Parameters, gradients and running statistics live outside, as
// tensors on the plan's device in plain f32 layouts (OIHW, [out, in], [C]); the plan
// binds their memory and keeps any blocked, NHWC or reduced-precision copy inside.
//
// Work is enqueued on the stream a call passes (a stream of the plan's device; on the
// CPU it runs inline, before the call returns). Asynchronous results say when they are
// valid: a gradient-ready hook gets the event after which the gradient is written;
// loss() waits for the last forward's loss; read() copies are complete on return.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/math_policy.h"
#include "backend/net_spec.h"
#include "backend/precision.h"
#include "tensor/allocator.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace cohort::backend {

// How the CPU backend computes the backward of a 1x1 convolution without groups,
// dilation, padding or bias (backend/cpu/weighted_layers.cc).
enum class PointwiseBackward {
  kAuto,         // matrix products for bf16 NHWC ones on a CPU with AMX (oneDNN 2), else oneDNN's
  kMatmul,       // matrix products for every one (its values NHWC)
  kConvolution,  // oneDNN's backward convolutions for every one
};
// "auto", "matmul", "convolution" (the option cpu_pointwise_backward); throws kInvalidArgument.
PointwiseBackward parse_pointwise_backward(std::string_view value);

struct PlanOptions {
  int64_t batch = 1;
  Layout layout = Layout::kNCHW;          // of the input and of read()/read_input_grad()
  bool training = true;                   // false: inference primitives, no backward
  bool input_grad = false;                // also compute the gradient of the input
  uint64_t seed = 0;                      // dropout
  Precision precision = Precision::kF32;  // backend/precision.h: what computes in what
  // The CPU backend's 1x1 convolutions
  PointwiseBackward pointwise_backward = PointwiseBackward::kAuto;
};

// Seconds spent per layer over the profiled steps: the layer's own forward and
// backward work, and the reorders (layout and type conversions, parameter casts,
// gradient copies) done for it. Indexed like NetSpec::layers. On the CPU each item is
// timed by the host clock as it runs; a device plan times its work with events on its
// stream, so its profile is complete once the profiled steps' work is done.
struct LayerTime {
  double forward = 0, backward = 0, reorder = 0;
};
struct PlanProfile {
  std::vector<LayerTime> layers;
  int64_t forwards = 0, backwards = 0;  // passes profiled
  bool device_timed = false;            // the layers' times are the device's (events on its stream)
};

// Where a plan finds parameter, gradient and state memory: contiguous f32 tensors on
// the plan's device, shaped as NetSpec's param_shapes and state_shapes.
struct Bindings {
  std::vector<Tensor> params, grads, states;
};

// Gradient `index` is final once `ready` completes (complete on the CPU).
using GradReady = std::function<void(int index, const Event& ready)>;

class Plan {
 public:
  virtual ~Plan() = default;
  // input: the batch, f32 [N, ...] in options().layout (or [N, F]); labels: i32 [N]
  // class indices, needed when the net ends in a loss (an undefined tensor
  // otherwise). Both on the plan's device. `step` picks the dropout masks.
  virtual void forward(const Tensor& input, const Tensor& labels, uint64_t step, const Stream& stream) = 0;
  // The mean loss of the last forward (nets ending in a loss); waits until it is
  // computed (a device plan copies it to the host), so call it once the step's work
  // is enqueued.
  virtual float loss() = 0;
  // Backward from the loss, or from `output_grad` (plain, like read(); undefined for
  // nets with a loss) for nets without one. Gradients overwrite the bound gradient
  // memory; `ready(i, event)` is called, on the calling thread, as soon as the work
  // that finishes gradient i is enqueued (with CUDA graphs: once the graph holding it is
  // launched). A plan replaying graphs records the same event for gradient i every
  // pass: whoever waits for it does so before the next backward.
  virtual void backward(const Tensor& output_grad, const GradReady& ready, const Stream& stream) = 0;
  // Copies layer `index`'s output into dst (f32, batch first, plain, in the plan's
  // layout; host or device memory), complete on return.
  virtual void read(int index, const Tensor& dst) = 0;
  // Copies the gradient of the input (options().input_grad) into dst, complete on return.
  virtual void read_input_grad(const Tensor& dst) = 0;
  virtual const PlanOptions& options() const = 0;
  // Multiplies the loss gradient that backward starts from (loss scaling); 1 = none.
  virtual void set_loss_scale(float scale) = 0;
  // Starts timing every primitive and loop of forward and backward (from zero), or
  // stops. Off by default: timing costs two clock reads per primitive.
  virtual void set_profiling(bool on) = 0;
  virtual const PlanProfile& profile() const = 0;
  // Whether the gradient-ready listener enqueues work of its own on the pass's stream
  // (a compression, a sum over passes). A plan that replays graphs then hands each event
  // out between two graphs, where its layer's work ends, so that work still overlaps the
  // rest of backward; otherwise it hands them out after the launch of a graph holding
  // many layers (the listener only waits for the events). Off by default.
  virtual void set_ready_enqueues(bool enqueues) {}
  // Whether the plan's passes now replay captured device graphs (CUDA with cuda_graphs=on,
  // after its warm-up; false on the CPU, and once a capture has failed).
  virtual bool replays_graphs() const { return false; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // One line for the run's header: the device and how it computes (a GPU's name and
  // its f32 math policy).
  virtual std::string describe() const { return name(); }
  // Where its plans compute and where their bindings must live.
  virtual Device device() const = 0;
  // The stream of this device that a model computes on by default (the CPU's inline
  // stream with the backend's threads; a device backend's own stream).
  virtual Stream stream() const = 0;
  // Throws kInvalidArgument for a spec the backend cannot run, or for a binding that
  // is not a contiguous f32 tensor of the expected shape on device() (naming it).
  virtual std::unique_ptr<Plan> compile(const NetSpec& spec, const Bindings& bindings, const PlanOptions& options) = 0;
};

// Which NHWC batch norms in training a GPU runs through cuDNN's BN-Ex form, and which
// through kernels/batch_norm.h's passes (backend/cuda/norm_layers.cc).
enum class CudaBatchNorm {
  kAuto,     // BN-Ex for f16 ones with a folded relu (and add) and channels a multiple of 4
  kKernels,  // the passes for every one
  kCudnn,    // BN-Ex for every f16 one with channels a multiple of 4, folded or not
};
// "auto", "kernels", "cudnn" (the option cuda_batch_norm); throws kInvalidArgument.
CudaBatchNorm parse_cuda_batch_norm(std::string_view value);

// What a device backend needs beyond its device.
struct BackendOptions {
  std::shared_ptr<Allocator> memory;  // device memory of its plans (null: a cache of its own)
  Tf32 tf32 = Tf32::kAuto;            // the f32 math policy (math_policy.h)
  bool cuda_graphs = false;           // CUDA: replay the plans' passes from graphs (cuda/step_graphs.h)
  CudaBatchNorm batch_norm = CudaBatchNorm::kAuto;
  // CUDA: a file keeping cuDNN's convolution choices across runs (cuda/algo_cache.h);
  // empty: each backend searches afresh.
  std::string algorithm_cache;
};

// The backend for `device`: the oneDNN CPU backend for host devices, the CUDA backend
// for a CUDA device. `threads` > 0 sets the OpenMP thread count of the CPU backend's
// calls (0: OpenMP's default). Throws kUnsupported for a device no backend serves.
std::shared_ptr<Backend> make_backend(Device device, int threads, const BackendOptions& options = {});

// Throws kInvalidArgument naming the first binding that is not a contiguous f32
// tensor on `device` shaped as `spec` says (what every backend's compile() checks).
void check_bindings(const NetSpec& spec, const Bindings& bindings, Device device);

// The oneDNN CPU backend; compile() refuses a precision the CPU cannot run
// (check_cpu_precision).
std::shared_ptr<Backend> make_cpu_backend(int threads);

// The CUDA backend on `device` (cuDNN + cuBLAS). Throws kUnsupported in builds
// without CUDA, kCuda / kCudnn / kCublas when the device cannot be used.
std::shared_ptr<Backend> make_cuda_backend(int device, const BackendOptions& options = {});

// Whether this build's CUDA backend can train a network (a build with CUDA).
bool cuda_backend_trains();
inline constexpr const char* kCudaCannotTrain = "this build of cohort has no CUDA backend (COHORT_WITH_CUDA)";

}  // namespace cohort::backend
