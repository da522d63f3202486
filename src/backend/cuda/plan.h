// The CUDA backend's plan (CUDA builds only): every descriptor, algorithm choice and
// forward buffer is made in compile(); a step enqueues its list of steps on the
// caller's stream. Convolutions, batch norm, pooling, LRN and the cuDNN activations
// run on cuDNN (the legacy calls, algorithms found once per shape by cudnnFind and
// cached in the backend), dense layers on cuBLAS, everything element-wise on the
// kernels/ functors the CPU backend's tests cover (kernels::for_each).
//
// Values between layers are stored in the plan's layout (NCHW, or NHWC for tensor
// cores) and in the type their layer computes in (backend/precision.h: f32, or f16/bf16
// with the loss in f32); a layer reading a value of another type reads a cast of it,
// made once per forward, whose gradient is cast back. Parameters stay f32 masters:
// convolutions and dense layers of another type or layout read a copy refreshed each
// forward and turn their weight gradients back into the f32 plain ones. A value's
// gradient lives only during a backward pass: its first writer takes memory from the
// caching allocator, later writers add to it (cuDNN's beta = 1, the functors'
// accumulate), and it goes back to the cache once its producer has read it (one
// stream: stream-ordered reuse is safe).
//
// With CUDA graphs (Context::graphs, step_graphs.h) the runs of device steps are
// captured after a warm-up pass and replayed. A replay must find every pointer where
// the capture saw it, so the plan then owns its input (the caller's is copied in
// before each pass; only host steps read the labels), gradients keep their memory for
// the plan's life (grad_done lets go of none), and nothing is allocated while a capture
// is open (alloc() refuses, which turns graphs off for the plan).
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/algo_cache.h"
#include "backend/cuda/cudnn_util.h"
#include "backend/cuda/fusion.h"
#include "backend/cuda/step_graphs.h"
#include "backend/math_policy.h"
#include "backend/precision.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"
#include "tensor/allocator.h"
#include "tensor/cuda_graph.h"

namespace cohort::backend::cuda {

// What every plan of one backend shares: the device, its handles, the algorithm cache,
// the memory its buffers come from, and the math policy.
struct Context {
  int device = 0;
  Stream stream;  // the backend's: plans build on it
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  std::shared_ptr<Allocator> memory;
  AlgoCache algos;
  bool tf32 = false;
  Tf32 policy = Tf32::kAuto;
  size_t workspace_limit = size_t{1} << 30;         // the largest workspace an algorithm may ask
  bool graphs = false;                              // replay the plans' device steps from CUDA graphs
  CudaBatchNorm batch_norm = CudaBatchNorm::kAuto;  // NHWC batch norm: cuDNN's BN-Ex or kernels/ (norm_layers.cc)
};

struct Step {
  std::function<void()> run;
  int layer = 0;
  bool reorder = false;  // layout conversions, booked as the profile's reorders
  // kHost: runs each pass even when graphs replay the others (step_graphs.h): its kernel
  // arguments change between passes, or it acts on the host. kNotify: a device step whose
  // host part, `notify`, runs after its work is enqueued (or its graph launched), each pass.
  StepKind kind = StepKind::kDevice;
  std::function<void()> notify = nullptr;
};
using Steps = std::vector<Step>;

// A value of the net: its batch shape, its cuDNN description, its forward data and,
// during a backward pass, its gradient.
struct DVal {
  Shape sample;  // per-sample shape ({C, H, W} or {F}; {} for the loss)
  DType dtype = DType::kF32;
  bool nhwc = false;  // an image value stored NHWC
  Desc4 desc;         // dims n, c, h, w and the strides of its layout
  TensorDesc td;
  Tensor out;
  Tensor grad;
  bool needs_grad = false;
  int writers = 0;           // backward steps built so far that write its gradient
  std::vector<DVal*> casts;  // values that are casts of this one (other types)
  int64_t numel() const { return static_cast<int64_t>(desc.dims[0]) * desc.dims[1] * desc.dims[2] * desc.dims[3]; }
  Shape dims() const { return Shape(desc.dims.begin(), desc.dims.end()); }
  // Pixels per channel of an NHWC image value (0 otherwise): what the layout-aware
  // functors take.
  int64_t nhwc_hw() const { return nhwc ? static_cast<int64_t>(desc.dims[2]) * desc.dims[3] : 0; }
  void* x() const { return out.data(); }
  void* dx() const { return grad.data(); }
  template <typename S>
  S* xs() const {
    return static_cast<S*>(out.data());
  }
  template <typename S>
  S* dxs() const {
    return static_cast<S*>(grad.data());
  }
  template <typename S>
  const S* cxs() const {
    return static_cast<const S*>(out.data());
  }
  template <typename S>
  const S* cdxs() const {
    return static_cast<const S*>(grad.data());
  }
};

// Calls fn.template operator()<S, C>() with the storage type and codec of `t` (f32,
// f16 or bf16): a layer's typed functors are chosen once, at build time.
template <typename Fn>
decltype(auto) with_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF16:
      return fn.template operator()<uint16_t, kernels::F16Codec>();
    case DType::kBF16:
      return fn.template operator()<uint16_t, kernels::BF16Codec>();
    default:
      return fn.template operator()<float, kernels::F32>();
  }
}

class CudaPlan;

class CudaLayer {
 public:
  CudaLayer(CudaPlan& plan, const LayerSpec& spec, int index);
  virtual ~CudaLayer() = default;
  virtual void build_forward() = 0;
  virtual void build_backward() {}
  Steps fwd, bwd;

 protected:
  friend class CudaPlan;
  // Input i as this layer reads it: the input itself, or its cast to this layer's type.
  DVal& in(int i = 0) const { return *inputs_.at(static_cast<size_t>(i)); }
  DVal& out() const;
  void alloc_out();  // the output's memory for the life of the plan
  DType dtype() const { return dt_; }
  bool nhwc() const { return nhwc_; }
  bool training() const;
  Context& ctx();
  cudaStream_t stream() const;
  const Stream& cstream() const;
  CudaPlan& plan_;
  const LayerSpec& spec_;
  int index_;
  // What it computes in and stores its output in (backend/precision.h), and whether an
  // image output is NHWC (the plan's layout, and always for reduced precision: tensor
  // cores); a layer's constructor may choose otherwise. Its inputs are read in the same
  // type and layout.
  DType dt_;
  bool nhwc_;
  std::vector<DVal*> inputs_;  // resolved by the plan before build_forward
};

class CudaPlan final : public Plan {
 public:
  CudaPlan(Context& ctx, const NetSpec& spec, Bindings bind, const PlanOptions& opt);
  ~CudaPlan() override;

  void forward(const Tensor& input, const Tensor& labels, uint64_t step, const Stream& stream) override;
  float loss() override;
  void backward(const Tensor& output_grad, const GradReady& ready, const Stream& stream) override;
  void read(int index, const Tensor& dst) override;
  void read_input_grad(const Tensor& dst) override;
  const PlanOptions& options() const override { return opt_; }
  void set_loss_scale(float scale) override;
  void set_profiling(bool on) override;
  void set_ready_enqueues(bool enqueues) override;
  const PlanProfile& profile() const override;
  bool replays_graphs() const override {
    return fwd_graphs_ && fwd_graphs_->captured() && (!bwd_graphs_ || bwd_graphs_->captured());
  }

  // ---- used by the layers ----
  Context& ctx_;
  const NetSpec& spec_;
  Bindings bind_;
  PlanOptions opt_;
  std::vector<DVal> vals_;
  Stream stream_;  // the stream of the running pass
  Tensor labels_;  // i32 [N] on the device (forward with labels)
  uint64_t step_ = 0;
  float loss_scale_ = 1.f;
  Tensor loss_sum_;             // f64 [1]: the forward's summed row losses
  bool loss_computed_ = false;  // the last forward had labels
  Tensor bad_label_;            // i32 [1]: set by the loss kernel for a label outside [0, K)
  const GradReady* ready_ = nullptr;
  Tensor workspace_;  // the largest workspace a convolution or fused batch norm asked
  Fusion fusion_;     // which relus their batch norms apply (fusion.h)

  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_.native()); }
  float* param(int i) const { return bind_.params.at(static_cast<size_t>(i)).data_as<float>(); }
  float* grad(int i) const { return bind_.grads.at(static_cast<size_t>(i)).data_as<float>(); }
  float* state(int i) const { return bind_.states.at(static_cast<size_t>(i)).data_as<float>(); }
  // Device memory for the life of the plan.
  Tensor alloc(const Shape& shape, DType dtype = DType::kF32);
  // Asks for at least `bytes` of convolution workspace (allocated once built).
  void need_workspace(size_t bytes) { workspace_need_ = std::max(workspace_need_, bytes); }
  void* workspace() const { return workspace_.data(); }
  size_t workspace_bytes() const { return workspace_.nbytes(); }
  // Before a step that writes v's gradient: whether it adds to what is there (an
  // earlier writer) or writes it fresh (the first, which also takes its memory).
  bool grad_write(Steps& steps, DVal& v);
  // Before the producer of v reads v's gradient (its backward): the gradients of its
  // casts are cast back into it, and a value nothing wrote a gradient into gets a zero
  // one.
  void grad_read(Steps& steps, DVal& v);
  // `v` in type `t` and layout `nhwc`: v itself, or a cast of it (made once; its
  // forward step goes into `steps`, its gradient back into v's in grad_read).
  DVal& as(DVal& v, DType t, bool nhwc, Steps& steps);
  // The caller's layout for image values (the input, read(), output gradients).
  bool nhwc() const { return opt_.layout == Layout::kNHWC; }
  // At least n ones of type t on the device (bias gradients as matrix products).
  const void* ones(DType t, int64_t n);
  // After the producer of v has read v's gradient: the memory goes back.
  void grad_done(Steps& steps, DVal& v);
  // Reports gradients `params` final after the work enqueued so far: a notify step, which
  // records an event (eagerly a new one each pass; in a graph one kept for the plan's
  // life, recorded by each launch) and hands it to the pass's GradReady.
  void ready(Steps& steps, const std::vector<int>& params);
  // Whether the plan replays its passes from CUDA graphs (memory is then kept, see above).
  bool graphs() const { return ctx_.graphs; }
  // n elements of a layer's weights in its type and order, made from the f32 master at
  // the start of each forward: every layer's of one type in one list launch
  // (kernels::for_each_list), which the profile books as `layer`'s reorders when it is
  // the first to ask.
  template <typename S, typename C>
  void copy_weights(int layer, int64_t n, const kernels::WeightsFromOihw<S, C>& f, S* dst, const float* master) {
    std::get<WeightCopies<S, C>>(weight_copies_).push_back({n, f, {dst, master}});
    if (weight_copier_ < 0) weight_copier_ = layer;
  }

 private:
  void build();
  std::unique_ptr<CudaLayer> make_layer(size_t i);
  void run(const Steps& steps, bool backward);
  void use(const Stream& stream);
  void copy_out(const DVal& v, const Tensor& dst, const Tensor& data, const char* what);
  // dst = (or +=) src, two forms of the value `v` (its shape): each a type and a layout.
  struct Form {
    DType dtype;
    bool nhwc;
  };
  void convert(const DVal& v, Form to, void* dst, Form from, const void* src, bool accumulate);

  // The pass's steps, eagerly or through its graphs (the profiler times them eagerly).
  void run_graphs(const Steps& steps, std::unique_ptr<StepGraphs>& graphs);

  std::vector<std::unique_ptr<CudaLayer>> layers_;
  // Per ready() step: the event its last run recorded, and the one graphs record (made
  // with the plan where it has graphs; declared before the graphs that record them).
  std::vector<Event> ready_events_;
  std::vector<std::shared_ptr<CudaEventImpl>> graph_events_;
  Event record_ready(size_t slot);
  bool ready_enqueues_ = false;    // the listener enqueues work of its own (backend.h)
  void make_graphs(bool forward);  // the StepGraphs of the backward pass, and of the forward one

  template <typename S, typename C>
  using WeightCopies = std::vector<kernels::ForEachItem<kernels::WeightsFromOihw<S, C>, S*, const float*>>;
  std::tuple<WeightCopies<float, kernels::F32>, WeightCopies<uint16_t, kernels::F16Codec>,
             WeightCopies<uint16_t, kernels::BF16Codec>>
      weight_copies_;
  int weight_copier_ = -1;  // the first layer with a weight copy

  std::unique_ptr<StepGraphs> fwd_graphs_, bwd_graphs_;
  bool capturing_ = false;
  bool fwd_graphs_warned_ = false, bwd_graphs_warned_ = false;
  Tensor input_;            // with graphs: the plan's copy of the caller's input
  std::deque<DVal> casts_;  // cast values (stable addresses)
  Steps fwd_, bwd_;
  size_t workspace_need_ = 0;
  std::map<DType, Tensor> ones_;
  bool profiling_ = false;
  mutable PlanProfile profile_;
  struct Timed {
    cudaEvent_t start, stop;
    int layer;
    bool reorder, backward;
  };
  mutable std::vector<Timed> timed_;  // profiled steps not yet read
  // Adds the times of the profiled steps whose events are complete (all of them, waiting,
  // with `wait`) and frees those events.
  void collect_profile(bool wait) const;
};

// The layer families (one file each).
std::unique_ptr<CudaLayer> make_input_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_conv_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_dense_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_batch_norm_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_lrn_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_pool_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_activation_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_dropout_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_add_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_concat_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_flatten_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_shortcut_a_layer(CudaPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CudaLayer> make_softmax_xent_layer(CudaPlan& plan, const LayerSpec& spec, int index);

}  // namespace cohort::backend::cuda
