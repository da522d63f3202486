#include "backend/cuda/plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/logging.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"
#include "tensor/cuda_graph.h"
#include "tensor/device_api.h"

namespace cohort::backend::cuda {

CudaLayer::CudaLayer(CudaPlan& plan, const LayerSpec& spec, int index)
    : plan_(plan),
      spec_(spec),
      index_(index),
      dt_(compute_dtype(spec, plan.opt_.precision)),
      nhwc_(spec.shape.size() == 3 && (plan.nhwc() || dt_ != DType::kF32)) {}

DVal& CudaLayer::out() const { return plan_.vals_[static_cast<size_t>(index_)]; }
void CudaLayer::alloc_out() { out().out = plan_.alloc(out().dims(), out().dtype); }
bool CudaLayer::training() const { return plan_.opt_.training; }
Context& CudaLayer::ctx() { return plan_.ctx_; }
cudaStream_t CudaLayer::stream() const { return plan_.stream(); }
const Stream& CudaLayer::cstream() const { return plan_.stream_; }

namespace {

// The batch shape a value is read and written in, in the plan's layout.
Shape user_shape(int64_t batch, const Shape& sample, Layout layout) {
  Shape s{batch};
  if (sample.size() == 3 && layout == Layout::kNHWC)
    s.insert(s.end(), {sample[1], sample[2], sample[0]});
  else
    s.insert(s.end(), sample.begin(), sample.end());
  return s;
}

// Stream capture on the plan's stream: in thread-local mode, so that a call of this
// thread that a graph cannot hold fails (and turns graphs off) instead of running.
class CudaGraphOps final : public GraphOps {
 public:
  CudaGraphOps(cudaStream_t stream, bool& capturing) : stream_(stream), capturing_(capturing) {}
  void begin_capture() override {
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    capturing_ = true;
  }
  std::shared_ptr<void> end_capture() override {
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    if (const cudaError_t rc = cudaStreamEndCapture(stream_, &graph); rc != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      check(rc, "cudaStreamEndCapture");
    }
    return instantiate_graph(graph);  // null: the steps enqueued nothing (they only made memory, once)
  }
  void abandon_capture() noexcept override {
    capturing_ = false;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t graph = nullptr;
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
    }
    cudaGetLastError();  // the failed call's error is reported by the exception
  }
  void launch(const std::shared_ptr<void>& graph) override {
    check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), stream_), "cudaGraphLaunch");
  }

 private:
  cudaStream_t stream_;
  bool& capturing_;
};

void check_input(const Tensor& t, Device device, const Shape& want, DType dtype, const char* what) {
  if (!(t.device() == device) || t.dtype() != dtype || !t.is_contiguous() || t.shape() != want)
    fail(Code::kInvalidArgument, what, " is ", t.describe(), " but the CUDA plan needs a contiguous ",
         dtype_name(dtype), shape_string(want), " on ", device.to_string());
}

}  // namespace

CudaPlan::CudaPlan(Context& ctx, const NetSpec& spec, Bindings bind, const PlanOptions& opt)
    : ctx_(ctx), spec_(spec), bind_(std::move(bind)), opt_(opt) {
  use(ctx_.stream);
  build();
}

CudaPlan::~CudaPlan() {
  // Work of this plan may still be running on the stream it last used, and its buffers go
  // back to the cache now.
  cudaStreamSynchronize(stream());
  for (Timed& t : timed_) {
    cudaEventDestroy(t.start);
    cudaEventDestroy(t.stop);
  }
}

Tensor CudaPlan::alloc(const Shape& shape, DType dtype) {
  // A replay would reuse the block after the allocator has handed it to someone else.
  if (capturing_) fail(Code::kInternal, "the CUDA plan asked for memory while capturing a graph");
  return Tensor::empty(shape, dtype, *ctx_.memory, stream_);
}

bool CudaPlan::grad_write(Steps& steps, DVal& v) {
  if (v.writers++ > 0) return true;
  DVal* p = &v;
  steps.push_back({[this, p] {
    if (!p->grad.defined() || p->grad.numel() == 0 || p->grad.data() == nullptr) p->grad = alloc(p->dims(), p->dtype);
  }});
  return false;
}

void CudaPlan::grad_read(Steps& steps, DVal& v) {
  // The gradients the casts of v received, cast back and summed into v's.
  for (DVal* c : v.casts) {
    if (c->writers == 0) continue;
    const bool acc = grad_write(steps, v);
    steps.push_back({[this, c, p = &v, acc] {
                       convert(*p, {p->dtype, p->nhwc}, p->dx(), {c->dtype, c->nhwc}, c->dx(), acc);
                     },
                     0, true});
    grad_done(steps, *c);
  }
  if (v.writers > 0 || &v == &vals_.back()) return;
  // Nothing downstream sends this value a gradient (an output nothing consumes): zero.
  DVal* p = &v;
  steps.push_back({[this, p] {
    if (!p->grad.defined() || p->grad.data() == nullptr) p->grad = alloc(p->dims(), p->dtype);
    zero(p->grad, stream_);
  }});
}

DVal& CudaPlan::as(DVal& v, DType t, bool nhwc, Steps& steps) {
  const bool image = v.sample.size() == 3;
  const bool want_nhwc = image && nhwc;
  auto fits = [&](const DVal& c) { return c.dtype == t && c.nhwc == want_nhwc; };
  if (fits(v)) return v;
  for (DVal* c : v.casts)
    if (fits(*c)) return *c;
  DVal& c = casts_.emplace_back();
  c.sample = v.sample;
  c.dtype = t;
  c.nhwc = want_nhwc;
  c.desc = describe4(opt_.batch, c.sample, c.nhwc ? Layout::kNHWC : Layout::kNCHW);
  c.td = tensor_desc(c.desc, t);
  c.needs_grad = v.needs_grad;
  c.out = alloc(c.dims(), t);
  v.casts.push_back(&c);
  steps.push_back({[this, src = &v, dst = &c] {
                     convert(*src, {dst->dtype, dst->nhwc}, dst->x(), {src->dtype, src->nhwc}, src->x(), false);
                   },
                   0, true});
  return c;
}

void CudaPlan::convert(const DVal& v, Form to, void* dst, Form from, const void* src, bool accumulate) {
  const bool image = v.sample.size() == 3;
  const int64_t c = v.desc.dims[1], hw = image ? static_cast<int64_t>(v.desc.dims[2]) * v.desc.dims[3] : 0;
  kernels::Reorder reorder = kernels::Reorder::kNone;
  if (image && hw > 1 && to.nhwc != from.nhwc)
    reorder = to.nhwc ? kernels::Reorder::kToNhwc : kernels::Reorder::kToNchw;
  if (reorder == kernels::Reorder::kNone && to.dtype == from.dtype && !accumulate) {
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(v.numel()) * dtype_size(to.dtype), cudaMemcpyDeviceToDevice,
                          stream()),
          "cudaMemcpyAsync");
    return;
  }
  with_type(to.dtype, [&]<typename D, typename DC>() {
    with_type(from.dtype, [&]<typename S, typename SC>() {
      const kernels::Convert<D, DC, S, SC> f{accumulate, reorder, c, hw};
      kernels::for_each(stream_, v.numel(), f, static_cast<D*>(dst), static_cast<const S*>(src));
    });
  });
}

const void* CudaPlan::ones(DType t, int64_t n) {
  Tensor& o = ones_[t];
  if (!o.defined() || o.data() == nullptr || o.numel() < n) {
    o = alloc({n}, t);
    with_type(t, [&]<typename S, typename C>() {
      kernels::for_each(stream_, n, kernels::Fill<S, C>{1.f}, static_cast<S*>(o.data()));
    });
  }
  return o.data();
}

void CudaPlan::grad_done(Steps& steps, DVal& v) {
  DVal* p = &v;
  if (p == &vals_[0] || graphs()) return;  // the input's gradient stays for read_input_grad()
  steps.push_back({[p] { p->grad = Tensor(); }});
}

void CudaPlan::ready(Steps& steps, const std::vector<int>& params) {
  const size_t slot = ready_events_.size();
  ready_events_.emplace_back();
  graph_events_.push_back(graphs() ? std::make_shared<CudaEventImpl>() : nullptr);
  steps.push_back({[this, slot] { ready_events_[slot] = record_ready(slot); }, 0, false, StepKind::kNotify,
                   [this, slot, params] {
                     if (!ready_ || !*ready_) return;
                     for (int p : params) (*ready_)(p, ready_events_[slot]);
                   }});
}

// Eagerly a new event each pass, as record_event makes (a listener may keep it); while
// capturing the slot's own event, which the graph records at each launch: a listener is
// done with one pass's events before the next backward (the engine's wait_all).
Event CudaPlan::record_ready(size_t slot) {
  if (!capturing_) return ready_ && *ready_ ? record_event(stream_) : Event();
  const std::shared_ptr<CudaEventImpl>& e = graph_events_[slot];
  record_in_capture(*e, stream());
  return Event(e);
}

void CudaPlan::use(const Stream& stream) {
  require(stream.device() == Device::cuda(ctx_.device), "the CUDA plan runs on cuda:", ctx_.device,
          ", not on a stream of ", stream.device().to_string());
  check(cudaSetDevice(ctx_.device), "cudaSetDevice");
  stream_ = stream;
  check(cudnnSetStream(ctx_.cudnn, this->stream()), "cudnnSetStream");
  check(cublasSetStream(ctx_.cublas, this->stream()), "cublasSetStream");
}

void CudaPlan::forward(const Tensor& input, const Tensor& labels, uint64_t step, const Stream& stream) {
  use(stream);
  const Device dev = Device::cuda(ctx_.device);
  check_input(input, dev, user_shape(opt_.batch, spec_.layers[0].shape, opt_.layout), DType::kF32, "the input");
  if (labels.defined() && labels.numel() > 0) {
    check_input(labels, dev, {opt_.batch}, DType::kI32, "the labels");
    labels_ = labels;
  } else {
    labels_ = Tensor();
  }
  if (graphs()) {  // replays read the plan's own copy (the labels only host steps read)
    copy(input_, input, stream_);
  } else {
    vals_[0].out = input;  // f32 in the caller's layout: its readers cast it
  }
  step_ = step;
  run(fwd_, false);
}

float CudaPlan::loss() {
  require(spec_.has_loss(), "the net has no loss layer");
  if (!loss_computed_) return std::nanf("");  // a forward of the logits only, as on the CPU
  double sum = 0;
  int32_t bad = 0;
  check(cudaMemcpyAsync(&sum, loss_sum_.data(), sizeof sum, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync");
  check(cudaMemcpyAsync(&bad, bad_label_.data(), sizeof bad, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  if (bad) {
    const DVal& logits = vals_[static_cast<size_t>(spec_.layers.back().inputs.at(0))];
    check(cudaMemsetAsync(bad_label_.data(), 0, sizeof(int32_t), stream()), "cudaMemsetAsync");
    fail(Code::kInvalidArgument, "a label of the batch is outside [0, ", logits.desc.dims[1], ")");
  }
  return static_cast<float>(sum / static_cast<double>(opt_.batch));
}

void CudaPlan::backward(const Tensor& output_grad, const GradReady& ready, const Stream& stream) {
  require(opt_.training, "backward needs a plan compiled for training");
  use(stream);
  if (!spec_.has_loss()) {
    DVal& last = vals_.back();
    require(output_grad.defined() && output_grad.numel() > 0,
            "backward of a net without a loss needs the output gradient");
    const Device dev = Device::cuda(ctx_.device);
    check_input(output_grad, dev, user_shape(opt_.batch, last.sample, opt_.layout), DType::kF32, "the output gradient");
    if (!graphs() || !last.grad.defined() || last.grad.data() == nullptr) last.grad = alloc(last.dims(), last.dtype);
    convert(last, {last.dtype, last.nhwc}, last.dx(), {DType::kF32, nhwc() && last.sample.size() == 3},
            output_grad.data(), false);
  }
  struct Listening {  // ready_ points at `ready` for this pass only, even if a step throws
    const GradReady*& to;
    ~Listening() { to = nullptr; }
  } listening{ready_};
  ready_ = &ready;
  run(bwd_, true);
}

// One eager pass first: it allocates the gradients and the lazily made buffers.
void CudaPlan::make_graphs(bool forward) {
  auto kinds = [](const Steps& steps) {
    std::vector<StepKind> k;
    for (const Step& s : steps) k.push_back(s.kind);
    return k;
  };
  if (forward) fwd_graphs_ = std::make_unique<StepGraphs>(kinds(fwd_), 1);
  if (opt_.training) bwd_graphs_ = std::make_unique<StepGraphs>(kinds(bwd_), 1, ready_enqueues_);
}

void CudaPlan::set_ready_enqueues(bool enqueues) {
  if (enqueues == ready_enqueues_) return;
  ready_enqueues_ = enqueues;
  // Backward segmented anew, captured again after a warm-up pass (off for good stays off).
  if (bwd_graphs_ && !bwd_graphs_->disabled()) make_graphs(false);
}

void CudaPlan::copy_out(const DVal& v, const Tensor& dst, const Tensor& data, const char* what) {
  const Shape want = user_shape(opt_.batch, v.sample, opt_.layout);
  if (dst.dtype() != DType::kF32 || !dst.is_contiguous() || dst.numel() != shape_numel(want))
    fail(Code::kInvalidArgument, what, ": the destination is ", dst.describe(), " but the value is f32",
         shape_string(want));
  require(data.defined() && data.data() != nullptr, what, ": the value was not computed (run forward first)");
  // f32 in the caller's layout, whatever the value's own type and layout.
  const Tensor src = alloc(want);
  convert(v, {DType::kF32, nhwc() && v.sample.size() == 3}, src.data(), {v.dtype, v.nhwc}, data.data(), false);
  copy(dst, src, stream_);
  synchronize(stream_);
}

void CudaPlan::read(int index, const Tensor& dst) {
  require(index >= 0 && index < static_cast<int>(vals_.size()), "read: no layer with index ", index);
  const DVal& v = vals_[static_cast<size_t>(index)];
  require(!v.sample.empty(), "read: the loss layer has no tensor output");
  copy_out(v, dst, v.out, "read");
}

void CudaPlan::read_input_grad(const Tensor& dst) {
  require(opt_.input_grad && vals_[0].needs_grad, "the plan was compiled without input_grad");
  copy_out(vals_[0], dst, vals_[0].grad, "read_input_grad");
}

void CudaPlan::set_loss_scale(float scale) {
  require(std::isfinite(scale) && scale > 0, "the loss scale must be finite and > 0, got ", scale);
  loss_scale_ = scale;
}

void CudaPlan::set_profiling(bool on) {
  collect_profile(true);
  profiling_ = on;
  // Profiling times each step eagerly; the graphs are captured anew afterwards.
  if (fwd_graphs_) fwd_graphs_->reset();
  if (bwd_graphs_) bwd_graphs_->reset();
  profile_ = {};
  profile_.layers.resize(spec_.layers.size());
  profile_.device_timed = true;
}

const PlanProfile& CudaPlan::profile() const {
  collect_profile(true);
  return profile_;
}

void CudaPlan::collect_profile(bool wait) const {
  std::erase_if(timed_, [&](Timed& t) {
    if (!wait && cudaEventQuery(t.stop) == cudaErrorNotReady) return false;
    float ms = 0;
    if (cudaEventSynchronize(t.stop) == cudaSuccess && cudaEventElapsedTime(&ms, t.start, t.stop) == cudaSuccess) {
      LayerTime& lt = profile_.layers[static_cast<size_t>(t.layer)];
      (t.reorder ? lt.reorder : t.backward ? lt.backward : lt.forward) += ms / 1e3;
    }
    cudaEventDestroy(t.start);
    cudaEventDestroy(t.stop);
    return true;
  });
  cudaGetLastError();  // a query's cudaErrorNotReady is no error
}

void CudaPlan::run_graphs(const Steps& steps, std::unique_ptr<StepGraphs>& graphs) {
  CudaGraphOps ops(stream(), capturing_);
  graphs->pass([&](size_t i) { steps[i].run(); }, ops, [&](size_t i) { steps[i].notify(); });
  const bool forward = &graphs == &fwd_graphs_;
  bool& warned = forward ? fwd_graphs_warned_ : bwd_graphs_warned_;
  if (graphs->disabled() && !warned) {
    warned = true;
    COHORT_LOG_WARN("CUDA graphs are off for this plan's ", forward ? "forward" : "backward", ": a capture failed (",
                    graphs->why_disabled(), "); that pass runs step by step");
  }
}

void CudaPlan::run(const Steps& steps, bool backward) {
  if (!profiling_) {
    std::unique_ptr<StepGraphs>& graphs = backward ? bwd_graphs_ : fwd_graphs_;
    if (graphs) {
      run_graphs(steps, graphs);
      return;
    }
    for (const Step& s : steps) {
      s.run();
      if (s.notify) s.notify();
    }
    return;
  }
  // Each step between two events on the stream; read when the profile is asked for, and
  // those already complete read now, so that a long profiled run holds few events.
  collect_profile(false);
  for (const Step& s : steps) {
    Timed t{nullptr, nullptr, s.layer, s.reorder, backward};
    check(cudaEventCreate(&t.start), "cudaEventCreate");
    check(cudaEventCreate(&t.stop), "cudaEventCreate");
    check(cudaEventRecord(t.start, stream()), "cudaEventRecord");
    s.run();
    check(cudaEventRecord(t.stop, stream()), "cudaEventRecord");
    timed_.push_back(t);
    if (s.notify) s.notify();
  }
  (backward ? profile_.backwards : profile_.forwards)++;
}

std::unique_ptr<CudaLayer> CudaPlan::make_layer(size_t i) {
  const LayerSpec& l = spec_.layers[i];
  const int idx = static_cast<int>(i);
  switch (l.kind) {
    case LayerKind::kInput:
      return make_input_layer(*this, l, idx);
    case LayerKind::kConv:
      return make_conv_layer(*this, l, idx);
    case LayerKind::kDense:
      return make_dense_layer(*this, l, idx);
    case LayerKind::kBatchNorm:
      return make_batch_norm_layer(*this, l, idx);
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool:
    case LayerKind::kGlobalAvgPool:
      return make_pool_layer(*this, l, idx);
    case LayerKind::kLrn:
      return make_lrn_layer(*this, l, idx);
    case LayerKind::kActivation:
      return make_activation_layer(*this, l, idx);
    case LayerKind::kDropout:
      return make_dropout_layer(*this, l, idx);
    case LayerKind::kConcat:
      return make_concat_layer(*this, l, idx);
    case LayerKind::kAdd:
      return make_add_layer(*this, l, idx);
    case LayerKind::kFlatten:
      return make_flatten_layer(*this, l, idx);
    case LayerKind::kShortcutA:
      return make_shortcut_a_layer(*this, l, idx);
    case LayerKind::kSoftmaxXent:
      return make_softmax_xent_layer(*this, l, idx);
  }
  fail(Code::kInternal, "layer '", l.name, "': unknown kind ", static_cast<int>(l.kind));
}

void CudaPlan::build() {
  const size_t n = spec_.layers.size();
  require(n >= 2 && spec_.layers[0].kind == LayerKind::kInput, "a network needs an input and at least one layer");
  fusion_ = plan_fusion(spec_, opt_);
  vals_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const LayerSpec& l = spec_.layers[i];
    std::unique_ptr<CudaLayer> layer = make_layer(i);
    DVal& v = vals_[i];
    v.sample = l.kind == LayerKind::kSoftmaxXent ? Shape{} : l.shape;
    v.dtype = layer->dt_;
    v.nhwc = v.sample.size() == 3 && layer->nhwc_;
    if (!v.sample.empty()) {
      v.desc = describe4(opt_.batch, v.sample, v.nhwc ? Layout::kNHWC : Layout::kNCHW);
      v.td = tensor_desc(v.desc, v.dtype);
    }
    bool needs = (i == 0 && opt_.input_grad) || !l.params.empty();
    for (int src : l.inputs) needs = needs || vals_[static_cast<size_t>(src)].needs_grad;
    v.needs_grad = needs && opt_.training;
    layers_.push_back(std::move(layer));
  }
  loss_sum_ = alloc({1}, DType::kF64);
  bad_label_ = alloc({1}, DType::kI32);
  check(cudaMemsetAsync(bad_label_.data(), 0, sizeof(int32_t), stream()), "cudaMemsetAsync");
  auto append = [](Steps& to, Steps& from, size_t layer) {
    for (Step& s : from) {
      s.layer = static_cast<int>(layer);
      to.push_back(std::move(s));
    }
    from.clear();
  };
  for (size_t i = 0; i < n; ++i) {
    CudaLayer& layer = *layers_[i];
    Steps casts;  // the inputs this layer reads in another type or layout
    for (int src : spec_.layers[i].inputs)
      layer.inputs_.push_back(&as(vals_[static_cast<size_t>(src)], layer.dt_, layer.nhwc_, casts));
    layer.build_forward();
    append(fwd_, casts, i);
    append(fwd_, layer.fwd, i);
  }
  if (weight_copier_ >= 0)  // the weight copies first, in a launch or two per type
    fwd_.insert(fwd_.begin(), Step{[this] {
                                     std::apply(
                                         [&](const auto&... lists) { (kernels::for_each_list(stream_, lists), ...); },
                                         weight_copies_);
                                   },
                                   weight_copier_, true});
  if (opt_.training) {
    for (size_t i = n; i-- > 1;) {
      if (!vals_[i].needs_grad) continue;
      layers_[i]->build_backward();
      append(bwd_, layers_[i]->bwd, i);
    }
    if (vals_[0].needs_grad) {  // the input's gradient, summed from its casts'
      Steps last;
      grad_read(last, vals_[0]);
      append(bwd_, last, 0);
    }
  }
  if (workspace_need_ > 0) workspace_ = alloc({static_cast<int64_t>(workspace_need_)}, DType::kU8);
  if (graphs()) {
    input_ = alloc(user_shape(opt_.batch, spec_.layers[0].shape, opt_.layout));
    vals_[0].out = input_;
    make_graphs(true);
  }
  synchronize(stream_);
}

}  // namespace cohort::backend::cuda
