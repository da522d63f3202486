#include "backend/cpu/plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/copy.h"
#include "kernels/reduce.h"

namespace cohort::backend::cpu {

memory::desc plain_md(const dims& d, dt type, Layout layout) {
  if (d.size() == 4) return {d, type, layout == Layout::kNHWC ? tag::nhwc : tag::nchw};
  if (d.size() == 2) return {d, type, tag::nc};
  if (d.size() == 1) return {d, type, tag::a};
  return {d, type, tag::abcde};
}

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

memory::desc like(const memory::desc& m, dt type) {
  if (dnnlc::dtype_of(m) == type) return m;
  return plain_md(dnnlc::dims_of(m), type);
}

[[noreturn]] void dnnl_fail(const LayerSpec& l, const dnnl::error& e) {
  fail(Code::kDnnl, "layer '", l.name, "' (", layer_kind_name(l.kind), "): oneDNN: ", e.what());
}

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

CpuLayer::CpuLayer(CpuPlan& plan, const LayerSpec& spec, int index)
    : plan_(plan), spec_(spec), index_(index), dt_(to_dnnl(compute_dtype(spec, plan.opt_.precision))) {}

Val& CpuLayer::in(int i) { return plan_.vals_[static_cast<size_t>(spec_.inputs.at(static_cast<size_t>(i)))]; }
Val& CpuLayer::out() { return plan_.vals_[static_cast<size_t>(index_)]; }
bool CpuLayer::training() const { return plan_.opt_.training; }
dnnl::engine& CpuLayer::eng() { return plan_.eng_; }

// ---- running ----

namespace {

// The batch shape a plan takes, in its layout: [N, C, H, W] (or NHWC), or [N, F].
Shape batch_shape(const dims& d, Layout layout) {
  if (d.size() == 4 && layout == Layout::kNHWC) return {d[0], d[2], d[3], d[1]};
  return Shape(d.begin(), d.end());
}

void check_host_f32(const Tensor& t, const Shape& want, const char* what) {
  if (!t.device().is_host() || t.dtype() != DType::kF32 || !t.is_contiguous() || t.shape() != want ||
      (t.data() == nullptr && t.numel() > 0))
    fail(Code::kInvalidArgument, what, " is ", t.describe(), " but the CPU plan needs a contiguous f32",
         shape_string(want), " in host memory");
}

}  // namespace

CpuPlan::CpuPlan(const NetSpec& spec, Bindings bind, const PlanOptions& opt, int threads)
    : eng_(dnnl::engine::kind::cpu, 0),
      stream_(eng_),
      spec_(spec),
      bind_(std::move(bind)),
      opt_(opt),
      threads_(threads) {
  loop_threads_ = threads_ > 0 ? threads_ : omp_get_max_threads();
  // Before build: oneDNN fixes each primitive's thread count when it is created.
  set_threads();
  build();
}

void CpuPlan::forward(const Tensor& input, const Tensor& labels, uint64_t step, const Stream&) {
  check_host_f32(input, batch_shape(vals_[0].shape, opt_.layout), "the input");
  if (labels.defined() && labels.numel() > 0) {
    if (!labels.device().is_host() || labels.dtype() != DType::kI32 || !labels.is_contiguous() ||
        labels.numel() != opt_.batch)
      fail(Code::kInvalidArgument, "the labels are ", labels.describe(), " but the CPU plan needs i32[", opt_.batch,
           "] in host memory");
    labels_ = labels.data_as<int32_t>();
  } else {
    labels_ = nullptr;
  }
  set_threads();
  vals_[0].mem.set_data_handle(input.data());
  step_ = step;
  run(fwd_, false);
}

void CpuPlan::backward(const Tensor& output_grad, const GradReady& ready, const Stream&) {
  require(opt_.training, "backward needs a plan compiled for training");
  set_threads();
  if (!spec_.has_loss()) {
    require(output_grad.defined() && output_grad.numel() > 0,
            "backward of a net without a loss needs the output gradient");
    check_host_f32(output_grad, batch_shape(vals_.back().shape, opt_.layout), "the output gradient");
    std::memcpy(out_grad_.get_data_handle(), output_grad.data(), out_grad_.get_desc().get_size());
  }
  ready_ = &ready;
  run(bwd_, true);
  ready_ = nullptr;
}

void CpuPlan::read(int index, const Tensor& dst) {
  require(index >= 0 && index < static_cast<int>(vals_.size()), "read: no layer with index ", index);
  const Val& v = vals_[static_cast<size_t>(index)];
  copy_out(v.mem, v.shape, dst, "read");
}

void CpuPlan::read_input_grad(const Tensor& dst) {
  require(opt_.input_grad && vals_[0].diff, "the plan was compiled without input_grad");
  copy_out(vals_[0].diff, vals_[0].shape, dst, "read_input_grad");
}

void CpuPlan::copy_out(const memory& m, const dims& shape, const Tensor& dst, const char* what) {
  const Shape want = batch_shape(shape, opt_.layout);
  if (!dst.device().is_host()) {  // through host memory
    Tensor host = Tensor::empty(want, DType::kF32);
    copy_out(m, shape, host, what);
    cohort::copy(dst, host);
    return;
  }
  if (dst.dtype() != DType::kF32 || !dst.is_contiguous() || dst.numel() != shape_numel(want))
    fail(Code::kInvalidArgument, what, ": the destination is ", dst.describe(), " but the value is f32",
         shape_string(want));
  memory user(plain_md(shape, dt::f32, opt_.layout), eng_, dst.data());
  dnnl::stream s(eng_);
  dnnl::reorder(m, user).execute(s, const_cast<memory&>(m), user);
  s.wait();
}

void CpuPlan::run(const Items& items, bool backward) {
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

void CpuPlan::execute(const Item& it) {
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

void CpuPlan::set_threads() const {
  if (threads_ > 0 && omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
}

// ---- building blocks the layers use ----

memory CpuPlan::take(Items& items, const memory& m, const memory::desc& want) {
  if (m.get_desc() == want) return m;
  memory copy(want, eng_);
  reorder(items, m, copy);
  return copy;
}

memory CpuPlan::view(Items& items, const memory& m, const memory::desc& md) {
  memory v(md, eng_, m.get_data_handle());
  items.push_back({{}, {}, [v, m]() mutable { v.set_data_handle(m.get_data_handle()); }});
  return v;
}

memory CpuPlan::diff_target(Items& after, Val& v, const memory::desc& md) {
  if (!v.diff) {
    v.diff = memory(md, eng_);
    return v.diff;
  }
  memory tmp(md, eng_);
  accumulate(after, tmp, v);
  return tmp;
}

void CpuPlan::deliver(Items& items, Val& v, const memory& m, bool may_alias) {
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
                         copy_bytes(b + lo, a + lo, static_cast<size_t>(hi - lo));
                       });
                     },
                     true});
  } else {
    accumulate(items, m, v);
  }
}

memory CpuPlan::diff_source(Items& before, Val& v, const memory::desc& md) {
  if (!v.diff) {  // nothing downstream produced a gradient: it is zero
    v.diff = memory(v.mem.get_desc(), eng_);
    std::memset(v.diff.get_data_handle(), 0, v.diff.get_desc().get_size());
  }
  return take(before, v.diff, md);
}

memory CpuPlan::param_in(Items& items, int param, const memory::desc& plain, const memory::desc& md) {
  memory user(plain, eng_, param_data(param));
  return take(items, user, md);
}

memory CpuPlan::grad_out(Items& after, int param, const memory::desc& plain, const memory::desc& md) {
  memory user(plain, eng_, grad_data(param));
  if (md == plain) return user;
  memory tmp(md, eng_);
  reorder(after, tmp, user);
  return tmp;
}

void CpuPlan::ready(Items& items, int param) {
  items.push_back({{}, {}, [this, param] {
                     if (ready_ && *ready_) (*ready_)(param, Event());
                   }});
}

void CpuPlan::accumulate(Items& items, const memory& from, Val& v) {
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

// ---- building the plan ----

std::unique_ptr<CpuLayer> CpuPlan::make_layer(size_t i, const Fusion& fusion) {
  const LayerSpec& l = spec_.layers[i];
  const int idx = static_cast<int>(i);
  switch (l.kind) {
    case LayerKind::kInput:
      return make_input_layer(*this, l, idx);
    case LayerKind::kConv: {
      auto layer = make_conv_layer(*this, l, idx);
      layer->fused_relu = fusion.fused[i];
      return layer;
    }
    case LayerKind::kDense: {
      auto layer = make_dense_layer(*this, l, idx);
      layer->fused_relu = fusion.fused[i];
      return layer;
    }
    case LayerKind::kBatchNorm:
      return make_batch_norm_layer(*this, l, idx, fusion.fused[i]);
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool:
    case LayerKind::kGlobalAvgPool:
      return make_pool_layer(*this, l, idx, fusion.pool_after_relu[i]);
    case LayerKind::kLrn:
      return make_lrn_layer(*this, l, idx);
    case LayerKind::kActivation: {
      const bool by_input = l.inputs.size() == 1 && fusion.fused[static_cast<size_t>(l.inputs[0])];
      if (by_input && spec_.layers[static_cast<size_t>(l.inputs[0])].kind == LayerKind::kBatchNorm)
        return make_pass_layer(*this, l, idx);
      if (by_input) return make_activation_layer(*this, l, idx, true, true);
      return make_activation_layer(*this, l, idx, fusion.relu_in_place[i], false);
    }
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

void CpuPlan::build() {
  const size_t n = spec_.layers.size();
  require(n >= 2 && spec_.layers[0].kind == LayerKind::kInput, "a network needs an input and at least one layer");
  const Fusion fusion = plan_fusion(spec_);
  vals_.resize(n);
  relu_grad_by_consumer_.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const LayerSpec& l = spec_.layers[i];
    dims d{opt_.batch};
    for (int64_t s : l.shape) d.push_back(s);
    if (l.kind == LayerKind::kSoftmaxXent) d = {1};
    vals_[i].shape = d;
    vals_[i].consumers = fusion.consumers[i];
    bool needs = (i == 0 && opt_.input_grad) || !l.params.empty();
    for (int src : l.inputs) needs = needs || vals_[static_cast<size_t>(src)].needs_grad;
    vals_[i].needs_grad = needs && opt_.training;
  }
  for (size_t i = 0; i < n; ++i) {
    std::unique_ptr<CpuLayer> layer = make_layer(i, fusion);
    try {
      layer->build_forward();
    } catch (const dnnl::error& e) {
      dnnl_fail(spec_.layers[i], e);
    }
    for (auto& it : layer->fwd) {
      it.layer = static_cast<int>(i);
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
    if (!vals_[i].needs_grad) continue;
    try {
      layers_[i]->build_backward();
    } catch (const dnnl::error& e) {
      dnnl_fail(spec_.layers[i], e);
    }
    for (auto& it : layers_[i]->bwd) {
      it.layer = static_cast<int>(i);
      bwd_.push_back(std::move(it));
    }
  }
}

}  // namespace cohort::backend::cpu
