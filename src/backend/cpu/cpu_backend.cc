// The oneDNN CPU backend. Every primitive, reorder and buffer of a plan is created
// in compile(); a step only sets the input handle and executes the lists. Tensors
// between layers stay in whatever (blocked) layout the primitives chose; only
// parameters and gradients are converted to and from their plain layouts. At bf16,
// layers compute and pass bf16 tensors (backend/precision.h); parameters are cast
// from their f32 masters by the reorder that blocks them, and weight gradients come
// out of oneDNN in f32.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/cpu/dnnl_compat.h"
#include "backend/cpu/dropout_mask.h"
#include "core/status.h"
#include "kernels/copy.h"
#include "kernels/reduce.h"
#include "kernels/softmax_xent.h"

extern "C" {
// libgomp, the OpenMP runtime oneDNN is built with (declared here so that cohort's
// own sources need no -fopenmp, which would pull in clang's libomp instead).
// GOMP_parallel is libgomp's entry for `#pragma omp parallel`: the plan's element-wise
// loops run on the same team as oneDNN's primitives, so no second pool competes with
// OpenMP workers still spinning after a primitive.
void omp_set_num_threads(int);
int omp_get_max_threads(void);
int omp_get_thread_num(void);
int omp_get_num_threads(void);
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
}

namespace cohort::backend {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;
using dims = memory::dims;

// One thing a plan does: a primitive with its arguments, or a plain function; the
// profile books it to its layer, as the layer's work or as a reorder.
struct Item {
  dnnl::primitive prim;
  std::unordered_map<int, memory> args;
  std::function<void()> fn;
  bool reorder = false;
  int layer = 0;
};
using Items = std::vector<Item>;

struct Val {
  dims shape;   // N, C, H, W or N, F
  memory mem;   // forward data
  memory diff;  // gradient, created while building backward
  bool needs_grad = false;
  int consumers = 0;
};

memory::desc plain_md(const dims& d, dt type = dt::f32, Layout layout = Layout::kNCHW) {
  if (d.size() == 4) return {d, type, layout == Layout::kNHWC ? tag::nhwc : tag::nchw};
  if (d.size() == 2) return {d, type, tag::nc};
  if (d.size() == 1) return {d, type, tag::a};
  return {d, type, tag::abcde};
}
memory::desc any_md(const dims& d, dt type) { return {d, type, tag::any}; }

dt to_dnnl(DType t) {
  switch (t) {
    case DType::kBF16:
      return dt::bf16;
    case DType::kF16:
      return dt::f16;
    default:
      return dt::f32;
  }
}
DType from_dnnl(dt t) { return t == dt::bf16 ? DType::kBF16 : t == dt::f16 ? DType::kF16 : DType::kF32; }

// `m` itself when it holds `type`; otherwise the plain layout of its shape in `type`
// (a value crossing into a layer of another precision is converted by one reorder).
memory::desc like(const memory::desc& m, dt type) {
  if (dnnlc::dtype_of(m) == type) return m;
  return plain_md(dnnlc::dims_of(m), type);
}

[[noreturn]] void dnnl_fail(const LayerSpec& l, const dnnl::error& e) {
  fail(Code::kDnnl, "layer '", l.name, "' (", layer_kind_name(l.kind), "): oneDNN: ", e.what());
}

class CpuPlan;

// A layer's forward and backward lists, built in compile().
class CpuLayer {
 public:
  CpuLayer(CpuPlan& plan, const LayerSpec& spec, int index);
  virtual ~CpuLayer() = default;
  virtual void build_forward() = 0;
  virtual void build_backward() {}
  Items fwd, bwd;
  bool fused_relu = false;  // conv, dense: apply the relu that follows (a post-op)

 protected:
  Val& in(int i = 0);
  Val& out();
  bool training() const;
  dnnl::engine& eng();
  CpuPlan& plan_;
  const LayerSpec& spec_;
  int index_;
  dt dt_;  // what the layer computes and stores its output in
};

class CpuPlan final : public Plan {
 public:
  CpuPlan(const NetSpec& spec, const Bindings& bind, const PlanOptions& opt, int threads)
      : eng_(dnnl::engine::kind::cpu, 0), stream_(eng_), spec_(spec), bind_(bind), opt_(opt), threads_(threads) {
    loop_threads_ = threads_ > 0 ? threads_ : omp_get_max_threads();
    // Before build: oneDNN fixes each primitive's thread count when it is created.
    set_threads();
    build();
  }

  void forward(const float* input, const int32_t* labels, uint64_t step) override {
    set_threads();
    vals_[0].mem.set_data_handle(const_cast<float*>(input));
    labels_ = labels;
    step_ = step;
    run(fwd_, false);
  }
  float loss() const override { return loss_; }
  void backward(const float* output_grad, const std::function<void(int)>& ready) override {
    require(opt_.training, "backward needs a plan compiled for training");
    set_threads();
    if (!spec_.has_loss()) {
      require(output_grad != nullptr, "backward of a net without a loss needs the output gradient");
      std::memcpy(out_grad_.get_data_handle(), output_grad, out_grad_.get_desc().get_size());
    }
    ready_ = &ready;
    run(bwd_, true);
    ready_ = nullptr;
  }
  void read(int index, float* dst) const override {
    const Val& v = vals_.at(static_cast<size_t>(index));
    copy_to_user(v.mem, v.shape, dst);
  }
  void read_input_grad(float* dst) const override {
    require(opt_.input_grad && vals_[0].diff, "the plan was compiled without input_grad");
    copy_to_user(vals_[0].diff, vals_[0].shape, dst);
  }
  const PlanOptions& options() const override { return opt_; }
  void set_loss_scale(float scale) override {
    require(std::isfinite(scale) && scale > 0, "the loss scale must be finite and > 0, got ", scale);
    loss_scale_ = scale;
  }
  void set_profiling(bool on) override {
    profiling_ = on;
    profile_ = {};
    profile_.layers.resize(spec_.layers.size());
  }
  const PlanProfile& profile() const override { return profile_; }

  // ---- used by the layers while building ----
  dnnl::engine eng_;
  dnnl::stream stream_;
  std::vector<Val> vals_;
  const NetSpec& spec_;
  const Bindings& bind_;
  PlanOptions opt_;
  const int32_t* labels_ = nullptr;
  uint64_t step_ = 0;
  float loss_ = 0;
  const std::function<void(int)>* ready_ = nullptr;
  float loss_scale_ = 1.f;
  memory out_grad_;

  // A reorder from `from` to `to` (layouts and data types may both differ).
  static void reorder(Items& items, const memory& from, const memory& to) {
    items.push_back({dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, {}, true});
  }

  // `v`'s data in layout `want`: v.mem itself, or a copy made by a reorder in `items`.
  memory take(Items& items, const memory& m, const memory::desc& want) {
    if (m.get_desc() == want) return m;
    memory copy(want, eng_);
    reorder(items, m, copy);
    return copy;
  }
  // Memory a backward primitive writes v's gradient into; later contributions are
  // added by reorders appended to `after`.
  memory diff_target(Items& after, Val& v, const memory::desc& md) {
    if (!v.diff) {
      v.diff = memory(md, eng_);
      return v.diff;
    }
    memory tmp(md, eng_);
    accumulate(after, tmp, v);
    return tmp;
  }
  // Hands `m` to v as (part of) its gradient; aliases m when v has none yet.
  void deliver(Items& items, Val& v, const memory& m, bool may_alias) {
    if (!v.diff && may_alias) {
      v.diff = m;
    } else if (!v.diff) {
      v.diff = memory(m.get_desc(), eng_);
      memory to = v.diff;
      items.push_back({{},
                       {},
                       [this, m, to] {
                         const char* a = static_cast<const char*>(m.get_data_handle());
                         char* b = static_cast<char*>(to.get_data_handle());
                         for_chunks(static_cast<int64_t>(m.get_desc().get_size()), [&](int64_t lo, int64_t hi) {
                           kernels::copy_bytes(b + lo, a + lo, static_cast<size_t>(hi - lo));
                         });
                       },
                       true});
    } else {
      accumulate(items, m, v);
    }
  }
  // v's gradient in layout md (reordered into a buffer when it differs).
  memory diff_source(Items& before, Val& v, const memory::desc& md) {
    if (!v.diff) {  // nothing downstream produced a gradient: it is zero
      v.diff = memory(v.mem.get_desc(), eng_);
      std::memset(v.diff.get_data_handle(), 0, v.diff.get_desc().get_size());
    }
    return take(before, v.diff, md);
  }
  // Plain copy of a parameter in layout md, refreshed at every forward.
  memory param_in(Items& items, int param, const memory::desc& plain, const memory::desc& md) {
    memory user(plain, eng_, bind_.params.at(static_cast<size_t>(param)));
    return take(items, user, md);
  }
  // Where a primitive writes gradient `param` (plain memory directly when the layout
  // is plain), followed by the reorder and the ready call.
  memory grad_out(Items& after, int param, const memory::desc& plain, const memory::desc& md) {
    memory user(plain, eng_, bind_.grads.at(static_cast<size_t>(param)));
    if (md == plain) return user;
    memory tmp(md, eng_);
    reorder(after, tmp, user);
    return tmp;
  }
  void ready(Items& items, int param) {
    items.push_back({{}, {}, [this, param] {
                       if (ready_ && *ready_) (*ready_)(param);
                     }});
  }
  static DType dtype(const memory& m) { return from_dnnl(dnnlc::dtype_of(m.get_desc())); }
  static int64_t elems(const memory& m) { return static_cast<int64_t>(m.get_desc().get_size() / dtype_size(dtype(m))); }
  // fn(begin, end) over [0, n), split across the plan's OpenMP team (cache-line
  // aligned). fn must not throw.
  void for_chunks(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (loop_threads_ <= 1 || n < (1 << 14)) {
      fn(0, n);
      return;
    }
    struct Work {
      int64_t n;
      const std::function<void(int64_t, int64_t)>* fn;
    } work{n, &fn};
    GOMP_parallel(
        [](void* p) {
          const Work& w = *static_cast<const Work*>(p);
          const int64_t parts = omp_get_num_threads(), i = omp_get_thread_num();
          const int64_t chunk = ((w.n + parts - 1) / parts + 15) / 16 * 16;
          const int64_t lo = i * chunk, hi = std::min(w.n, lo + chunk);
          if (lo < hi) (*w.fn)(lo, hi);
        },
        &work, static_cast<unsigned>(loop_threads_), 0);
  }

 private:
  void accumulate(Items& items, const memory& from, Val& v) {
    if (from.get_desc() == v.diff.get_desc()) {  // same layout: a vectorised loop
      memory to = v.diff;
      items.push_back({{}, {}, [this, from, to] {
                         const char* a = static_cast<const char*>(from.get_data_handle());
                         char* b = static_cast<char*>(to.get_data_handle());
                         const DType t = dtype(from);
                         const size_t es = dtype_size(t);
                         for_chunks(elems(from), [&](int64_t lo, int64_t hi) {
                           const size_t off = static_cast<size_t>(lo) * es;
                           kernels::combine(b + off, a + off, static_cast<size_t>(hi - lo), t, kernels::Reduce::kSum);
                         });
                       }});
      return;
    }
    dnnl::post_ops po;
    po.append_sum(1.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    dnnl::reorder::primitive_desc pd(from, v.diff, attr);
    items.push_back({dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, v.diff}}, {}, true});
  }
  void run(const Items& items, bool backward) {
    if (!profiling_) {
      for (const Item& it : items) it.fn ? it.fn() : execute(it);
      stream_.wait();
      return;
    }
    using Clock = std::chrono::steady_clock;
    for (const Item& it : items) {
      const auto t0 = Clock::now();
      it.fn ? it.fn() : execute(it);
      stream_.wait();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      LayerTime& t = profile_.layers[static_cast<size_t>(it.layer)];
      (it.reorder ? t.reorder : backward ? t.backward : t.forward) += s;
    }
    (backward ? profile_.backwards : profile_.forwards)++;
  }
  void execute(const Item& it) {
    try {
      it.prim.execute(stream_, it.args);
    } catch (const dnnl::error& e) {
      // Name the primitive and the first argument whose layout it did not expect.
      dnnl::primitive_desc_base pd(const_cast<dnnl_primitive_desc_t>(it.prim.get_primitive_desc()), true);
      std::string bad;
      for (const auto& [arg, m] : it.args)
        if (pd.query_md(dnnl::query::exec_arg_md, arg) != m.get_desc()) bad += cat(" ", arg);
      fail(Code::kDnnl, "oneDNN could not execute ", pd.impl_info_str(), ": ", e.what(),
           bad.empty() ? "" : "; unexpected layout of argument(s)", bad);
    }
  }
  void set_threads() const {
    if (threads_ > 0 && omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
  }
  void copy_to_user(const memory& m, const dims& shape, float* dst) const {
    memory user(plain_md(shape, dt::f32, opt_.layout), eng_, dst);
    dnnl::stream s(eng_);
    dnnl::reorder(m, user).execute(s, const_cast<memory&>(m), user);
    s.wait();
  }
  void build();

  int threads_;
  bool profiling_ = false;
  PlanProfile profile_;
  int loop_threads_ = 1;  // the OpenMP team of the element-wise loops
  std::vector<std::unique_ptr<CpuLayer>> layers_;
  Items fwd_, bwd_;
};

CpuLayer::CpuLayer(CpuPlan& plan, const LayerSpec& spec, int index)
    : plan_(plan), spec_(spec), index_(index), dt_(to_dnnl(compute_dtype(spec, plan.opt_.precision))) {}

Val& CpuLayer::in(int i) { return plan_.vals_[static_cast<size_t>(spec_.inputs.at(static_cast<size_t>(i)))]; }
Val& CpuLayer::out() { return plan_.vals_[static_cast<size_t>(index_)]; }
bool CpuLayer::training() const { return plan_.opt_.training; }
dnnl::engine& CpuLayer::eng() { return plan_.eng_; }

// oneDNN's geometry of a window from input dims `in` to output dims `out`.
dnnlc::Geometry geometry(const Window& w, const dims& in, const dims& out) {
  auto r = [](int64_t i, int64_t o, int k, int s, int p, int d) {
    return std::max<int64_t>(0, (o - 1) * s + (static_cast<int64_t>(k) - 1) * d + 1 - i - p);
  };
  return {{w.sh, w.sw},
          {w.kh, w.kw},
          {w.dh - 1, w.dw - 1},
          {w.ph, w.pw},
          {r(in[2], out[2], w.kh, w.sh, w.ph, w.dh), r(in[3], out[3], w.kw, w.sw, w.pw, w.dw)}};
}
dnnl::prop_kind fwd_prop(bool training) {
  return training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
}

// ---------------------------------------------------------------------------------
class InputLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    out().mem = memory(plain_md(out().shape, dt::f32, plan_.opt_.layout), eng(), nullptr);
  }
};

// Convolution and inner product share their structure: weights (+ bias), forward,
// backward-weights (first, so gradients are ready early), backward-data. Weights are
// cast from their f32 masters by the reorder that blocks them; weight and bias
// gradients are f32 whatever the layer computes in.
template <typename Fwd, typename BwdData, typename BwdWeights>
class WeightedLayer : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    const dims& s = in().shape;
    const dims& d = out().shape;
    plain_w_ = weights_plain();
    has_bias_ = spec_.bias;
    bias_md_ = memory::desc({d[1]}, dt::f32, tag::a);
    src_md_ = s.size() == 2 ? plain_md(s, dt_) : any_md(s, dt_);
    w_any_ = any_md(dnnlc::dims_of(plain_w_), dt_);
    dnnl::primitive_attr attr;
    if (fused_relu) {
      dnnl::post_ops po;
      dnnlc::append_eltwise(po, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(po);
    }
    fpd_ = fwd_pd(fwd_prop(training()), src_md_, w_any_, has_bias_ ? &bias_md_ : nullptr, any_md(d, dt_), attr);
    src_ = plan_.take(fwd, in().mem, fpd_.src_desc());
    w_ = plan_.param_in(fwd, spec_.params[0], plain_w_, fpd_.weights_desc());
    out().mem = memory(fpd_.dst_desc(), eng());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_DST, out().mem}};
    if (has_bias_)
      args[DNNL_ARG_BIAS] = memory(bias_md_, eng(), plan_.bind_.params[static_cast<size_t>(spec_.params[1])]);
    fwd.push_back({Fwd(fpd_), args, {}});
  }
  void build_backward() override {
    const memory::desc dw_any = any_md(dnnlc::dims_of(plain_w_), dt::f32);
    auto wpd = bwd_weights_pd(src_md_, dw_any, has_bias_ ? &bias_md_ : nullptr, any_md(out().shape, dt_));
    Items after;
    memory src = plan_.take(bwd, src_, wpd.src_desc());
    memory dd = plan_.diff_source(bwd, out(), wpd.diff_dst_desc());
    memory dw = plan_.grad_out(after, spec_.params[0], plain_w_, wpd.diff_weights_desc());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
    if (has_bias_)
      args[DNNL_ARG_DIFF_BIAS] = memory(bias_md_, eng(), plan_.bind_.grads[static_cast<size_t>(spec_.params[1])]);
    bwd.push_back({BwdWeights(wpd), args, {}});
    for (auto& it : after) bwd.push_back(it);
    plan_.ready(bwd, spec_.params[0]);
    if (has_bias_) plan_.ready(bwd, spec_.params[1]);
    if (!in().needs_grad) return;
    auto dpd =
        bwd_data_pd(in().shape.size() == 2 ? src_md_ : any_md(in().shape, dt_), w_any_, any_md(out().shape, dt_));
    Items post;
    memory dd2 = plan_.diff_source(bwd, out(), dpd.diff_dst_desc());
    memory w = plan_.take(bwd, w_, dpd.weights_desc());
    memory ds = plan_.diff_target(post, in(), dpd.diff_src_desc());
    bwd.push_back({BwdData(dpd), {{DNNL_ARG_DIFF_DST, dd2}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, ds}}, {}});
    for (auto& it : post) bwd.push_back(it);
  }

 protected:
  virtual memory::desc weights_plain() const = 0;
  virtual typename Fwd::primitive_desc fwd_pd(dnnl::prop_kind pk, const memory::desc& s, const memory::desc& w,
                                              const memory::desc* bias, const memory::desc& d,
                                              const dnnl::primitive_attr& attr) = 0;
  virtual typename BwdData::primitive_desc bwd_data_pd(const memory::desc& s, const memory::desc& w,
                                                       const memory::desc& d) = 0;
  virtual typename BwdWeights::primitive_desc bwd_weights_pd(const memory::desc& s, const memory::desc& w,
                                                             const memory::desc* bias, const memory::desc& d) = 0;
  memory::desc bias_md_, src_md_, w_any_, plain_w_;
  bool has_bias_ = false;
  typename Fwd::primitive_desc fpd_;
  memory src_, w_;
};

class ConvLayer final : public WeightedLayer<dnnlc::ConvFwd, dnnlc::ConvBwdData, dnnlc::ConvBwdWeights> {
 public:
  using WeightedLayer::WeightedLayer;
  void build_forward() override {
    geo_ = geometry(spec_.win, in().shape, out().shape);
    WeightedLayer::build_forward();
  }

 private:
  memory::desc weights_plain() const override {
    const auto& w = spec_.win;
    const int64_t o = spec_.out_channels, i = plan_.vals_[static_cast<size_t>(spec_.inputs[0])].shape[1];
    const int64_t g = spec_.groups;
    if (g == 1) return {{o, i, w.kh, w.kw}, dt::f32, tag::oihw};
    return {{g, o / g, i / g, w.kh, w.kw}, dt::f32, tag::goihw};
  }
  dnnlc::ConvFwd::primitive_desc fwd_pd(dnnl::prop_kind pk, const memory::desc& s, const memory::desc& w,
                                        const memory::desc* bias, const memory::desc& d,
                                        const dnnl::primitive_attr& attr) override {
    return dnnlc::conv_forward(eng(), pk, s, w, bias, d, geo_, attr);
  }
  dnnlc::ConvBwdData::primitive_desc bwd_data_pd(const memory::desc& s, const memory::desc& w,
                                                 const memory::desc& d) override {
    return dnnlc::conv_backward_data(eng(), s, w, d, geo_, fpd_);
  }
  dnnlc::ConvBwdWeights::primitive_desc bwd_weights_pd(const memory::desc& s, const memory::desc& w,
                                                       const memory::desc* bias, const memory::desc& d) override {
    return dnnlc::conv_backward_weights(eng(), s, w, bias, d, geo_, fpd_);
  }
  dnnlc::Geometry geo_;
};

class DenseLayer final : public WeightedLayer<dnnlc::IpFwd, dnnlc::IpBwdData, dnnlc::IpBwdWeights> {
 public:
  using WeightedLayer::WeightedLayer;

 private:
  memory::desc weights_plain() const override {
    const int64_t i = plan_.vals_[static_cast<size_t>(spec_.inputs[0])].shape[1];
    return {{spec_.out_channels, i}, dt::f32, tag::oi};
  }
  dnnlc::IpFwd::primitive_desc fwd_pd(dnnl::prop_kind pk, const memory::desc& s, const memory::desc& w,
                                      const memory::desc* bias, const memory::desc& d,
                                      const dnnl::primitive_attr& attr) override {
    return dnnlc::ip_forward(eng(), pk, s, w, bias, d, attr);
  }
  dnnlc::IpBwdData::primitive_desc bwd_data_pd(const memory::desc& s, const memory::desc& w,
                                               const memory::desc& d) override {
    return dnnlc::ip_backward_data(eng(), s, w, d, fpd_);
  }
  dnnlc::IpBwdWeights::primitive_desc bwd_weights_pd(const memory::desc& s, const memory::desc& w,
                                                     const memory::desc* bias, const memory::desc& d) override {
    return dnnlc::ip_backward_weights(eng(), s, w, bias, d, fpd_);
  }
};

// Statistics, scale and shift are f32 at every precision. oneDNN 2.x takes scale and
// shift packed into one [2, C] tensor (copied per step, C floats each); 3.x binds the
// parameters and their gradients directly.
class BatchNormLayer final : public CpuLayer {
 public:
  // fuse_relu: the relu that follows is applied here (one pass less each way).
  BatchNormLayer(CpuPlan& plan, const LayerSpec& spec, int index, bool fuse_relu)
      : CpuLayer(plan, spec, index), fuse_relu_(fuse_relu) {}
  void build_forward() override {
    md_ = like(in().mem.get_desc(), dt_);
    src_ = plan_.take(fwd, in().mem, md_);
    auto flags = dnnlc::bn_scale_shift_flags();
    if (fuse_relu_) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
    if (!training()) flags = flags | dnnl::normalization_flags::use_global_stats;
    flags_ = flags;
    pd_ = dnnlc::bn_forward(eng(), fwd_prop(training()), md_, spec_.eps, flags);
    const int64_t c = out().shape[1];
    cmd_ = memory::desc({c}, dt::f32, tag::a);
    auto st = [&](int i) { return plan_.bind_.states[static_cast<size_t>(spec_.states[static_cast<size_t>(i)])]; };
    out().mem = memory(pd_.dst_desc(), eng());
    if (training()) {
      mean_ = memory(pd_.mean_desc(), eng());
      var_ = memory(pd_.variance_desc(), eng());
    } else {
      mean_ = memory(cmd_, eng(), st(0));
      var_ = memory(cmd_, eng(), st(1));
    }
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, out().mem}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, var_}};
    bind_scale_shift(fwd, args, true);
    if (fuse_relu_ && training()) {
      ws_ = memory(pd_.workspace_desc(), eng());
      args[DNNL_ARG_WORKSPACE] = ws_;
    }
    fwd.push_back({dnnlc::BnFwd(pd_), args, {}});
    if (!training()) return;
    int64_t count = 1;
    for (size_t i = 0; i < out().shape.size(); ++i)
      if (i != 1) count *= out().shape[i];
    float* rm = st(0);
    float* rv = st(1);
    const float m = spec_.momentum;
    const float unbias = count > 1 ? static_cast<float>(count) / static_cast<float>(count - 1) : 1.f;
    fwd.push_back({{}, {}, [this, rm, rv, m, unbias, c] {
                     const float* bm = static_cast<const float*>(mean_.get_data_handle());
                     const float* bv = static_cast<const float*>(var_.get_data_handle());
                     for (int64_t i = 0; i < c; ++i) {
                       rm[i] = (1 - m) * rm[i] + m * bm[i];
                       rv[i] = (1 - m) * rv[i] + m * bv[i] * unbias;
                     }
                   }});
  }
  void build_backward() override {
    auto bpd = dnnlc::bn_backward(eng(), md_, md_, spec_.eps, flags_, pd_);
    Items post;
    memory dd = plan_.diff_source(bwd, out(), bpd.diff_dst_desc());
    memory ds =
        in().needs_grad ? plan_.diff_target(post, in(), bpd.diff_src_desc()) : memory(bpd.diff_src_desc(), eng());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_},
                                         {DNNL_ARG_MEAN, mean_},
                                         {DNNL_ARG_VARIANCE, var_},
                                         {DNNL_ARG_DIFF_DST, dd},
                                         {DNNL_ARG_DIFF_SRC, ds}};
    bind_scale_shift(bwd, args, false);
    if (ws_) args[DNNL_ARG_WORKSPACE] = ws_;
    float* dscale = param(plan_.bind_.grads, 0);
    float* dshift = param(plan_.bind_.grads, 1);
    const int64_t c = out().shape[1];
    if constexpr (dnnlc::kPackedScaleShift) {
      memory dss(bpd.diff_weights_desc(), eng());
      args[dnnlc::kArgDiffScaleShift] = dss;
      bwd.push_back({dnnlc::BnBwd(bpd), args, {}});
      bwd.push_back({{}, {}, [dss, dscale, dshift, c] {
                       const float* d = static_cast<const float*>(dss.get_data_handle());
                       std::memcpy(dscale, d, static_cast<size_t>(c) * sizeof(float));
                       std::memcpy(dshift, d + c, static_cast<size_t>(c) * sizeof(float));
                     }});
    } else {
      args[dnnlc::kArgDiffScale] = memory(cmd_, eng(), dscale);
      args[dnnlc::kArgDiffShift] = memory(cmd_, eng(), dshift);
      bwd.push_back({dnnlc::BnBwd(bpd), args, {}});
    }
    plan_.ready(bwd, spec_.params[0]);
    plan_.ready(bwd, spec_.params[1]);
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  float* param(const std::vector<float*>& v, int i) const {
    return v[static_cast<size_t>(spec_.params[static_cast<size_t>(i)])];
  }
  // Scale and shift as arguments: the parameters themselves (3.x's backward takes no
  // shift: passing one fails its execution), or (2.x) a packed copy refreshed by the
  // first forward item.
  void bind_scale_shift(Items& items, std::unordered_map<int, memory>& args, bool forward) {
    float* scale = param(plan_.bind_.params, 0);
    float* shift = param(plan_.bind_.params, 1);
    if constexpr (dnnlc::kPackedScaleShift) {
      if (!ss_) {
        const int64_t c = out().shape[1];
        ss_ = memory(pd_.weights_desc(), eng());
        items.push_back({{}, {}, [this, scale, shift, c] {
                           float* ss = static_cast<float*>(ss_.get_data_handle());
                           std::memcpy(ss, scale, static_cast<size_t>(c) * sizeof(float));
                           std::memcpy(ss + c, shift, static_cast<size_t>(c) * sizeof(float));
                         }});
      }
      args[dnnlc::kArgScaleShift] = ss_;
    } else {
      args[dnnlc::kArgScale] = memory(cmd_, eng(), scale);
      if (forward) args[dnnlc::kArgShift] = memory(cmd_, eng(), shift);
    }
  }
  bool fuse_relu_;
  memory::desc md_, cmd_;
  dnnl::normalization_flags flags_{};
  dnnlc::BnFwd::primitive_desc pd_;
  memory src_, ss_, mean_, var_, ws_;
};

class PoolLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    const bool global = spec_.kind == LayerKind::kGlobalAvgPool;
    Window w = spec_.win;
    dims od = out().shape;
    if (global) {
      w.kh = static_cast<int>(in().shape[2]);
      w.kw = static_cast<int>(in().shape[3]);
      w.sh = w.kh;
      w.sw = w.kw;
      od = {in().shape[0], in().shape[1], 1, 1};
    }
    algo_ =
        spec_.kind == LayerKind::kMaxPool ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
    src_md_ = like(in().mem.get_desc(), dt_);
    memory src = plan_.take(fwd, in().mem, src_md_);
    geo_ = geometry(w, in().shape, od);
    od_ = od;
    pd_ = dnnlc::pool_forward(eng(), fwd_prop(training()), algo_, src_md_, any_md(od, dt_), geo_);
    memory dst(pd_.dst_desc(), eng());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
    if (training() && algo_ == dnnl::algorithm::pooling_max) {
      ws_ = memory(pd_.workspace_desc(), eng());
      args[DNNL_ARG_WORKSPACE] = ws_;
    }
    fwd.push_back({dnnlc::PoolFwd(pd_), args, {}});
    pool_dst_ = dst;
    if (!global) {
      out().mem = dst;
      return;
    }
    // [N, C, 1, 1] → plain [N, C]
    memory flat4(plain_md(od, dt_), eng());
    out().mem = memory(plain_md(out().shape, dt_), eng(), flat4.get_data_handle());
    flat4_ = flat4;
    CpuPlan::reorder(fwd, dst, flat4);
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    auto bpd = dnnlc::pool_backward(eng(), algo_, src_md_, pool_dst_.get_desc(), geo_, pd_);
    memory dd;
    if (spec_.kind == LayerKind::kGlobalAvgPool) {
      memory d2 = plan_.diff_source(bwd, out(), plain_md(out().shape, dt_));
      memory d4(plain_md(od_, dt_), eng(), d2.get_data_handle());
      dd = plan_.take(bwd, d4, bpd.diff_dst_desc());
      keep_ = d4;
    } else {
      dd = plan_.diff_source(bwd, out(), bpd.diff_dst_desc());
    }
    Items post;
    memory ds = plan_.diff_target(post, in(), bpd.diff_src_desc());
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_DIFF_SRC, ds}};
    if (ws_) args[DNNL_ARG_WORKSPACE] = ws_;
    bwd.push_back({dnnlc::PoolBwd(bpd), args, {}});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  dnnl::algorithm algo_{};
  memory::desc src_md_;
  dnnlc::Geometry geo_;
  dims od_;
  dnnlc::PoolFwd::primitive_desc pd_;
  memory ws_, pool_dst_, flat4_, keep_;
};

class LrnLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    md_ = like(in().mem.get_desc(), dt_);
    src_ = plan_.take(fwd, in().mem, md_);
    lp_ = {spec_.lrn_size, spec_.lrn_alpha, spec_.lrn_beta, spec_.lrn_k};
    pd_ = dnnlc::lrn_forward(eng(), fwd_prop(training()), md_, lp_);
    out().mem = memory(pd_.dst_desc(), eng());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, out().mem}};
    if (training() && pd_.workspace_desc().get_size() > 0) {
      ws_ = memory(pd_.workspace_desc(), eng());
      args[DNNL_ARG_WORKSPACE] = ws_;
    }
    fwd.push_back({dnnlc::LrnFwd(pd_), args, {}});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    auto bpd = dnnlc::lrn_backward(eng(), out().mem.get_desc(), md_, lp_, pd_);
    memory dd = plan_.diff_source(bwd, out(), bpd.diff_dst_desc());
    Items post;
    memory ds = plan_.diff_target(post, in(), bpd.diff_src_desc());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_DIFF_SRC, ds}};
    if (ws_) args[DNNL_ARG_WORKSPACE] = ws_;
    bwd.push_back({dnnlc::LrnBwd(bpd), args, {}});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  memory::desc md_;
  dnnlc::LrnParams lp_{};
  dnnlc::LrnFwd::primitive_desc pd_;
  memory src_, ws_;
};

class ActLayer final : public CpuLayer {
 public:
  // in_place: overwrite the input; done_by_input: the producer already applied this
  // relu (a conv or dense post-op), so only backward is left (in place, from dst).
  ActLayer(CpuPlan& plan, const LayerSpec& spec, int index, bool in_place, bool done_by_input = false)
      : CpuLayer(plan, spec, index), in_place_(in_place || done_by_input), done_by_input_(done_by_input) {}
  void build_forward() override {
    md_ = like(in().mem.get_desc(), dt_);
    in_place_ = in_place_ && md_ == in().mem.get_desc();
    require(in_place_ || !done_by_input_, "layer '", spec_.name, "': a fused relu must keep its input's layout");
    src_ = plan_.take(fwd, in().mem, md_);
    switch (spec_.act) {
      case ActKind::kRelu:
      case ActKind::kLeakyRelu:
        algo_ = in_place_ ? dnnl::algorithm::eltwise_relu_use_dst_for_bwd : dnnl::algorithm::eltwise_relu;
        break;
      case ActKind::kElu:
        algo_ = dnnl::algorithm::eltwise_elu;
        break;
      case ActKind::kTanh:
        algo_ = dnnl::algorithm::eltwise_tanh;
        break;
      case ActKind::kSigmoid:
        algo_ = dnnl::algorithm::eltwise_logistic;
        break;
    }
    alpha_ = spec_.act == ActKind::kLeakyRelu || spec_.act == ActKind::kElu ? spec_.alpha : 0.f;
    pd_ = dnnlc::eltwise_forward(eng(), fwd_prop(training()), algo_, md_, alpha_, 0.f);
    out().mem = in_place_ ? in().mem : memory(md_, eng());
    if (!done_by_input_) fwd.push_back({dnnlc::EltFwd(pd_), {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, out().mem}}, {}});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    auto bpd = dnnlc::eltwise_backward(eng(), algo_, md_, md_, alpha_, 0.f, pd_);
    memory dd = plan_.diff_source(bwd, out(), md_);
    Items post;
    memory ds;
    if (in_place_ && !in().diff) {
      ds = dd;
      in().diff = dd;
    } else {
      ds = plan_.diff_target(post, in(), md_);
    }
    const int data_arg = in_place_ ? DNNL_ARG_DST : DNNL_ARG_SRC;
    memory data = in_place_ ? out().mem : src_;
    bwd.push_back({dnnlc::EltBwd(bpd), {{data_arg, data}, {DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_DIFF_SRC, ds}}, {}});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  bool in_place_, done_by_input_;
  dnnl::algorithm algo_{};
  float alpha_ = 0;
  memory::desc md_;
  dnnlc::EltFwd::primitive_desc pd_;
  memory src_;
};

// A layer whose work another layer does (a relu fused into the batch norm before
// it): its output and gradient are its input's.
class PassLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override { out().mem = in().mem; }
  void build_backward() override {
    if (!in().needs_grad) return;
    plan_.deliver(bwd, in(), plan_.diff_source(bwd, out(), in().mem.get_desc()), true);
  }
};

// The forward draws the keep mask (kernels::dropout_factor's draws) and keeps it for
// backward, which applies it to the gradient.
class DropoutLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    if (!training() || spec_.p <= 0.f) {
      out().mem = in().mem;
      identity_ = true;
      return;
    }
    const memory::desc md = like(in().mem.get_desc(), dt_);
    src_ = plan_.take(fwd, in().mem, md);
    out().mem = memory(md, eng());
    keep_.resize(static_cast<size_t>(CpuPlan::elems(src_)));
    fwd.push_back({{}, {}, [this] {
                     const uint64_t stream = (plan_.step_ << 20) ^ static_cast<uint64_t>(index_);
                     plan_.for_chunks(CpuPlan::elems(src_), [&](int64_t lo, int64_t hi) {
                       dropout_mask(keep_.data() + lo, hi - lo, static_cast<uint64_t>(lo), stream, plan_.opt_.seed,
                                    spec_.p);
                       apply(src_, out().mem, lo, hi);
                     });
                   }});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    const memory::desc md = out().mem.get_desc();
    memory dd = plan_.diff_source(bwd, out(), md);
    if (identity_) {
      plan_.deliver(bwd, in(), dd, true);
      return;
    }
    Items post;
    memory ds = plan_.diff_target(post, in(), md);
    bwd.push_back({{}, {}, [this, dd, ds] {
                     plan_.for_chunks(CpuPlan::elems(dd), [&](int64_t lo, int64_t hi) { apply(dd, ds, lo, hi); });
                   }});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  void apply(const memory& src, const memory& dst, int64_t lo, int64_t hi) const {
    const float scale = 1.f / (1.f - spec_.p);
    const uint8_t* keep = keep_.data() + lo;
    if (CpuPlan::dtype(src) == DType::kBF16)
      dropout_apply_mask(static_cast<const uint16_t*>(src.get_data_handle()) + lo,
                         static_cast<uint16_t*>(dst.get_data_handle()) + lo, keep, hi - lo, scale);
    else
      dropout_apply_mask(static_cast<const float*>(src.get_data_handle()) + lo,
                         static_cast<float*>(dst.get_data_handle()) + lo, keep, hi - lo, scale);
  }
  bool identity_ = false;
  memory src_;
  std::vector<uint8_t> keep_;
};

class ConcatLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    std::vector<memory::desc> srcs;
    std::unordered_map<int, memory> args;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      const memory& m = in(static_cast<int>(i)).mem;
      memory src = plan_.take(fwd, m, like(m.get_desc(), dt_));
      srcs.push_back(src.get_desc());
      args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = src;
    }
    auto pd = dnnlc::concat(eng(), nullptr, 1, srcs);
    memory::desc dst = pd.dst_desc();
    if (!views_ok(dst)) {
      dst = plain_md(out().shape, dt_);
      pd = dnnlc::concat(eng(), &dst, 1, srcs);
    }
    out().mem = memory(pd.dst_desc(), eng());
    args[DNNL_ARG_DST] = out().mem;
    fwd.push_back({dnnl::concat(pd), args, {}});
  }
  void build_backward() override {
    const memory::desc md = out().mem.get_desc();
    memory dd = plan_.diff_source(bwd, out(), md);
    int64_t off = 0;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      Val& v = in(static_cast<int>(i));
      const int64_t c = v.shape[1];
      if (v.needs_grad) {
        dims sub = out().shape;
        sub[1] = c;
        dims offs(sub.size(), 0);
        offs[1] = off;
        memory view(md.submemory_desc(sub, offs), eng(), dd.get_data_handle());
        Items post;
        memory ds = plan_.diff_target(post, v, like(v.mem.get_desc(), dt_));
        CpuPlan::reorder(bwd, view, ds);
        for (auto& it : post) bwd.push_back(it);
      }
      off += c;
    }
  }

 private:
  bool views_ok(const memory::desc& dst) {
    try {
      int64_t off = 0;
      for (size_t i = 0; i < spec_.inputs.size(); ++i) {
        dims sub = out().shape;
        sub[1] = in(static_cast<int>(i)).shape[1];
        dims offs(sub.size(), 0);
        offs[1] = off;
        (void)dst.submemory_desc(sub, offs);
        off += sub[1];
      }
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }
};

class AddLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    const memory::desc md = like(in(0).mem.get_desc(), dt_);
    std::vector<memory> ins;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) ins.push_back(plan_.take(fwd, in(static_cast<int>(i)).mem, md));
    out().mem = memory(md, eng());
    memory dst = out().mem;
    if (dt_ != dt::f32) {  // oneDNN's binary add, in place after the first pair
      const dnnl::binary add(dnnlc::binary_add(eng(), md));
      for (size_t k = 1; k < ins.size(); ++k)
        fwd.push_back(
            {add, {{DNNL_ARG_SRC_0, k == 1 ? ins[0] : dst}, {DNNL_ARG_SRC_1, ins[k]}, {DNNL_ARG_DST, dst}}, {}});
      return;
    }
    // f32: one vectorised pass over the buffers (oneDNN's sum is a slow generic kernel
    // for blocked layouts).
    fwd.push_back({{}, {}, [this, ins, dst] {
                     float* y = static_cast<float*>(dst.get_data_handle());
                     const float* a = static_cast<const float*>(ins[0].get_data_handle());
                     const float* b = static_cast<const float*>(ins[1].get_data_handle());
                     plan_.for_chunks(CpuPlan::elems(dst), [&](int64_t lo, int64_t hi) {
                       for (int64_t i = lo; i < hi; ++i) y[i] = a[i] + b[i];
                       for (size_t k = 2; k < ins.size(); ++k) {
                         const float* c = static_cast<const float*>(ins[k].get_data_handle());
                         for (int64_t i = lo; i < hi; ++i) y[i] += c[i];
                       }
                     });
                   }});
  }
  void build_backward() override {
    memory dd = plan_.diff_source(bwd, out(), out().mem.get_desc());
    bool aliased = false;
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      Val& v = in(static_cast<int>(i));
      if (!v.needs_grad) continue;
      plan_.deliver(bwd, v, dd, !aliased && !v.diff);
      aliased = aliased || v.diff == dd;
    }
  }
};

class FlattenLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    if (in().shape.size() == 2) {
      out().mem = plan_.take(fwd, in().mem, plain_md(out().shape, dt_));
      return;
    }
    plain4_ = memory(plain_md(in().shape, dt_), eng());
    CpuPlan::reorder(fwd, in().mem, plain4_);
    out().mem = memory(plain_md(out().shape, dt_), eng(), plain4_.get_data_handle());
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    memory d2 = plan_.diff_source(bwd, out(), plain_md(out().shape, dt_));
    if (in().shape.size() == 2) {
      plan_.deliver(bwd, in(), d2, true);
      return;
    }
    memory d4(plain_md(in().shape, dt_), eng(), d2.get_data_handle());
    plan_.deliver(bwd, in(), d4, true);
    keep_ = d4;
  }

 private:
  memory plain4_, keep_;
};

class ShortcutALayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    src_ = plan_.take(fwd, in().mem, plain_md(in().shape, dt_));
    out().mem = memory(plain_md(out().shape, dt_), eng());
    fwd.push_back({{}, {}, [this] { move(true, src_.get_data_handle(), out().mem.get_data_handle()); }});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    memory dd = plan_.diff_source(bwd, out(), plain_md(out().shape, dt_));
    Items post;
    memory ds = plan_.diff_target(post, in(), plain_md(in().shape, dt_));
    bwd.push_back({{}, {}, [this, dd, ds] { move(false, ds.get_data_handle(), dd.get_data_handle()); }});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  void move(bool forward, void* x, void* y) const {
    if (dt_ == dt::f32)
      move_as(forward, static_cast<float*>(x), static_cast<float*>(y));
    else
      move_as(forward, static_cast<uint16_t*>(x), static_cast<uint16_t*>(y));
  }
  // Forward: y[n, c + pad, h, w] = x[n, c, s*h, s*w], other channels 0. Backward is
  // the transpose (gradient positions not sampled are 0). Pure data movement, so
  // bf16 values move as their bits.
  template <typename T>
  void move_as(bool forward, T* x, T* y) const {
    const dims& is = in().shape;
    const dims& os = plan_.vals_[static_cast<size_t>(index_)].shape;
    const int64_t n = is[0], ci = is[1], hi = is[2], wi = is[3], co = os[1], ho = os[2], wo = os[3];
    const int64_t s = spec_.win.sh, pad = (co - ci) / 2;
    if (forward)
      std::memset(y, 0, static_cast<size_t>(n * co * ho * wo) * sizeof(T));
    else
      std::memset(x, 0, static_cast<size_t>(n * ci * hi * wi) * sizeof(T));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < ci; ++c)
        for (int64_t h = 0; h < ho; ++h)
          for (int64_t w = 0; w < wo; ++w) {
            T& xv = x[((b * ci + c) * hi + h * s) * wi + w * s];
            T& yv = y[((b * co + c + pad) * ho + h) * wo + w];
            if (forward)
              yv = xv;
            else
              xv = yv;
          }
  }
  const Val& in() const { return plan_.vals_[static_cast<size_t>(spec_.inputs[0])]; }
  Val& in() { return CpuLayer::in(); }
  memory src_;
};

// Softmax and the loss are f32 at every precision (backend/precision.h).
class SoftmaxXentLayer final : public CpuLayer {
 public:
  using CpuLayer::CpuLayer;
  void build_forward() override {
    logits_ = plan_.take(fwd, in().mem, plain_md(in().shape, dt_));
    fwd.push_back({{}, {}, [this] { compute(nullptr); }});
  }
  void build_backward() override {
    if (!in().needs_grad) return;
    Items post;
    memory ds = plan_.diff_target(post, in(), plain_md(in().shape, dt_));
    bwd.push_back({{}, {}, [this, ds] { compute(static_cast<float*>(ds.get_data_handle())); }});
    for (auto& it : post) bwd.push_back(it);
  }

 private:
  void compute(float* grad) {
    if (!plan_.labels_ && !grad) {  // inference of the logits only
      plan_.loss_ = std::nanf("");
      return;
    }
    require(plan_.labels_ != nullptr, "layer '", spec_.name, "': the loss needs labels");
    const int64_t n = in().shape[0], k = in().shape[1];
    const float* x = static_cast<const float*>(logits_.get_data_handle());
    const float grad_scale = plan_.loss_scale_ / static_cast<float>(n);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = plan_.labels_[i];
      require(label >= 0 && label < k, "label ", label, " of sample ", i, " is outside [0, ", k, ")");
      total += kernels::softmax_xent_row(x + i * k, k, label, spec_.label_smoothing, grad ? grad + i * k : nullptr,
                                         grad_scale);
    }
    plan_.loss_ = static_cast<float>(total / static_cast<double>(n));
  }
  memory logits_;
};

// ---------------------------------------------------------------------------------
// Whether layer i may overwrite its input: it is a relu, its input has one consumer,
// and the input's producer does not read its own output in backward.
bool relu_in_place(const NetSpec& spec, const std::vector<int>& consumers, size_t i) {
  const LayerSpec& l = spec.layers[i];
  if (l.kind != LayerKind::kActivation || (l.act != ActKind::kRelu && l.act != ActKind::kLeakyRelu)) return false;
  if (l.act == ActKind::kLeakyRelu && l.alpha < 0) return false;
  const int src = l.inputs[0];
  if (consumers[static_cast<size_t>(src)] != 1) return false;
  const LayerKind pk = spec.layers[static_cast<size_t>(src)].kind;
  return pk == LayerKind::kConv || pk == LayerKind::kBatchNorm || pk == LayerKind::kAdd || pk == LayerKind::kDense ||
         pk == LayerKind::kConcat;
}

void CpuPlan::build() {
  const size_t n = spec_.layers.size();
  require(n >= 2 && spec_.layers[0].kind == LayerKind::kInput, "a network needs an input and at least one layer");
  vals_.resize(n);
  std::vector<int> consumers(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const LayerSpec& l = spec_.layers[i];
    dims d{opt_.batch};
    for (int64_t s : l.shape) d.push_back(s);
    if (l.kind == LayerKind::kSoftmaxXent) d = {1};
    vals_[i].shape = d;
    for (int src : l.inputs) consumers[static_cast<size_t>(src)]++;
    bool needs = (i == 0 && opt_.input_grad) || !l.params.empty();
    for (int src : l.inputs) needs = needs || vals_[static_cast<size_t>(src)].needs_grad;
    vals_[i].needs_grad = needs && opt_.training;
  }
  for (size_t i = 0; i < n; ++i) vals_[i].consumers = consumers[i];
  // batch norm, conv or dense → relu pairs where the relu is the only consumer: the
  // producer applies the relu (batch norm's backward too; a conv's or dense's backward
  // leaves the relu's gradient to the relu layer, from the fused output)
  std::vector<bool> fused(n, false);
  for (size_t i = 1; i < n; ++i) {
    const LayerSpec& l = spec_.layers[i];
    if (l.kind != LayerKind::kActivation || l.act != ActKind::kRelu || l.inputs.size() != 1) continue;
    const size_t src = static_cast<size_t>(l.inputs[0]);
    const LayerKind k = spec_.layers[src].kind;
    if ((k == LayerKind::kBatchNorm || k == LayerKind::kConv || k == LayerKind::kDense) && consumers[src] == 1)
      fused[src] = true;
  }
  for (size_t i = 0; i < n; ++i) {
    const LayerSpec& l = spec_.layers[i];
    const int idx = static_cast<int>(i);
    std::unique_ptr<CpuLayer> layer;
    switch (l.kind) {
      case LayerKind::kInput:
        layer = std::make_unique<InputLayer>(*this, l, idx);
        break;
      case LayerKind::kConv:
        layer = std::make_unique<ConvLayer>(*this, l, idx);
        layer->fused_relu = fused[i];
        break;
      case LayerKind::kDense:
        layer = std::make_unique<DenseLayer>(*this, l, idx);
        layer->fused_relu = fused[i];
        break;
      case LayerKind::kBatchNorm:
        layer = std::make_unique<BatchNormLayer>(*this, l, idx, fused[i]);
        break;
      case LayerKind::kMaxPool:
      case LayerKind::kAvgPool:
      case LayerKind::kGlobalAvgPool:
        layer = std::make_unique<PoolLayer>(*this, l, idx);
        break;
      case LayerKind::kLrn:
        layer = std::make_unique<LrnLayer>(*this, l, idx);
        break;
      case LayerKind::kActivation:
        if (l.inputs.size() == 1 && fused[static_cast<size_t>(l.inputs[0])] &&
            spec_.layers[static_cast<size_t>(l.inputs[0])].kind == LayerKind::kBatchNorm)
          layer = std::make_unique<PassLayer>(*this, l, idx);
        else if (l.inputs.size() == 1 && fused[static_cast<size_t>(l.inputs[0])])
          layer = std::make_unique<ActLayer>(*this, l, idx, true, true);
        else
          layer = std::make_unique<ActLayer>(*this, l, idx, relu_in_place(spec_, consumers, i));
        break;
      case LayerKind::kDropout:
        layer = std::make_unique<DropoutLayer>(*this, l, idx);
        break;
      case LayerKind::kConcat:
        layer = std::make_unique<ConcatLayer>(*this, l, idx);
        break;
      case LayerKind::kAdd:
        layer = std::make_unique<AddLayer>(*this, l, idx);
        break;
      case LayerKind::kFlatten:
        layer = std::make_unique<FlattenLayer>(*this, l, idx);
        break;
      case LayerKind::kShortcutA:
        layer = std::make_unique<ShortcutALayer>(*this, l, idx);
        break;
      case LayerKind::kSoftmaxXent:
        layer = std::make_unique<SoftmaxXentLayer>(*this, l, idx);
        break;
    }
    try {
      layer->build_forward();
    } catch (const dnnl::error& e) {
      dnnl_fail(l, e);
    }
    for (auto& it : layer->fwd) {
      it.layer = idx;
      fwd_.push_back(std::move(it));
    }
    layers_.push_back(std::move(layer));
  }
  if (!opt_.training) return;
  if (!spec_.has_loss()) {
    Val& last = vals_.back();
    out_grad_ = memory(plain_md(last.shape, dt::f32, opt_.layout), eng_);
    last.diff = out_grad_;
  }
  for (size_t i = n; i-- > 1;) {
    const LayerSpec& l = spec_.layers[i];
    if (!vals_[i].needs_grad) continue;
    try {
      layers_[i]->build_backward();
    } catch (const dnnl::error& e) {
      dnnl_fail(l, e);
    }
    for (auto& it : layers_[i]->bwd) {
      it.layer = static_cast<int>(i);
      bwd_.push_back(std::move(it));
    }
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) {}
  std::string name() const override { return "cpu"; }
  std::unique_ptr<Plan> compile(const NetSpec& spec, const Bindings& bindings, const PlanOptions& options) override {
    require(options.batch > 0, "batch size must be positive, got ", options.batch);
    check_cpu_precision(options.precision, probe_cpu_isa());
    return std::make_unique<CpuPlan>(spec, bindings, options, threads_);
  }

 private:
  int threads_;
};

}  // namespace

std::shared_ptr<Backend> make_cpu_backend(int threads) { return std::make_shared<CpuBackend>(threads); }

CpuIsa probe_cpu_isa() {
  CpuIsa isa;
  const auto v = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [v](dnnl_cpu_isa_t i) { return (v & static_cast<unsigned>(i)) == static_cast<unsigned>(i); };
  isa.bf16 = dnnlc::effective_isa_has_bf16();
  isa.amx = has(dnnl_cpu_isa_avx512_core_amx);
  if (isa.amx)
    isa.name = "avx512_core_amx";
  else if (isa.bf16)
    isa.name = "avx512_core_bf16";
  else if (has(dnnl_cpu_isa_avx512_core_vnni))
    isa.name = "avx512_core_vnni";
  else if (has(dnnl_cpu_isa_avx512_core))
    isa.name = "avx512_core";
  else if (has(dnnl_cpu_isa_avx2))
    isa.name = "avx2";
  else
    isa.name = cat("oneDNN cpu_isa 0x", std::hex, v);
  return isa;
}

}  // namespace cohort::backend
