// The Backend interface: a device that compiles a NetSpec for one batch size and
// layout into a Plan, which runs forward and backward with every primitive and
// buffer created once. Parameters, gradients and running statistics live outside,
// in plain layouts (OIHW, [out, in], [C]); the plan binds their memory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/net_spec.h"
#include "backend/precision.h"

namespace cohort::backend {

struct PlanOptions {
  int64_t batch = 1;
  Layout layout = Layout::kNCHW;          // of the input and of read()/read_input_grad()
  bool training = true;                   // false: inference primitives, no backward
  bool input_grad = false;                // also compute the gradient of the input
  uint64_t seed = 0;                      // dropout
  Precision precision = Precision::kF32;  // backend/precision.h: what computes in what
};

// Seconds spent per layer over the profiled steps: the layer's own forward and
// backward work, and the reorders (layout and type conversions, parameter casts,
// gradient copies) done for it. Indexed like NetSpec::layers.
struct LayerTime {
  double forward = 0, backward = 0, reorder = 0;
};
struct PlanProfile {
  std::vector<LayerTime> layers;
  int64_t forwards = 0, backwards = 0;  // passes profiled
};

// Where a plan finds parameter, gradient and state memory (plain, f32, host).
struct Bindings {
  std::vector<float*> params, grads, states;
};

class Plan {
 public:
  virtual ~Plan() = default;
  // input: the batch in options().layout (or [N, F]); labels: [N] class indices,
  // needed when the net ends in a loss. `step` picks the dropout masks.
  virtual void forward(const float* input, const int32_t* labels, uint64_t step) = 0;
  // The mean loss of the last forward (nets ending in a loss).
  virtual float loss() const = 0;
  // Backward from the loss, or from `output_grad` (plain, like read()) for nets
  // without one. Gradients overwrite the bound gradient memory; `ready(i)` is called
  // as soon as gradient i is final.
  virtual void backward(const float* output_grad, const std::function<void(int)>& ready) = 0;
  // Copies layer `index`'s output into dst (batch first, plain, in the plan's layout).
  virtual void read(int index, float* dst) const = 0;
  // Copies the gradient of the input (options().input_grad) into dst.
  virtual void read_input_grad(float* dst) const = 0;
  virtual const PlanOptions& options() const = 0;
  // Multiplies the loss gradient that backward starts from (loss scaling); 1 = none.
  virtual void set_loss_scale(float scale) = 0;
  // Starts timing every primitive and loop of forward and backward (from zero), or
  // stops. Off by default: timing costs two clock reads per primitive.
  virtual void set_profiling(bool on) = 0;
  virtual const PlanProfile& profile() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Throws kInvalidArgument for a spec the backend cannot run.
  virtual std::unique_ptr<Plan> compile(const NetSpec& spec, const Bindings& bindings, const PlanOptions& options) = 0;
};

// The oneDNN CPU backend; `threads` > 0 sets the OpenMP thread count of its calls.
// compile() refuses a precision the CPU cannot run (check_cpu_precision).
std::shared_ptr<Backend> make_cpu_backend(int threads);

// The CUDA backend on `device` (cuDNN + cuBLAS). Throws kUnsupported in builds
// without CUDA, kCuda / kCudnn / kCublas when the device cannot be used.
std::shared_ptr<Backend> make_cuda_backend(int device);

// Whether the CUDA backend can run a network. While it cannot, models compute on the
// CPU whatever GPUs are visible (device=auto), and device=cuda is refused with
// kCudaCannotTrain.
bool cuda_backend_trains();
inline constexpr const char* kCudaCannotTrain =
    "the CUDA backend cannot train yet: it creates its cuDNN and cuBLAS handles but runs no network";

}  // namespace cohort::backend
