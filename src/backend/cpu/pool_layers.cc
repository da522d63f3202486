// Pooling: max, average and global average. Max pooling over 16-channel blocks on a
// CPU with AVX-512 runs max_pool.h's loops, oneDNN's primitives the rest.
#include <algorithm>

#include "backend/cpu/max_pool.h"
#include "backend/cpu/plan.h"

namespace cohort::backend::cpu {
namespace {

// The tag of md, a [n, c, h, w] value, when max_pool.h's loops read it as their
// input: nChw16c or NHWC (false otherwise).
bool pool_input_tag(const memory::desc& md, const dims& d, dt type, tag& t) {
  for (tag candidate : {tag::nChw16c, tag::nhwc})
    if (md == memory::desc(d, type, candidate)) {
      t = candidate;
      return true;
    }
  return false;
}

PoolLayout layout_of(tag t, const dims& d) {
  return t == tag::nChw16c ? blocked_layout(d[0], d[1], d[2], d[3], 16)
         : t == tag::nhwc  ? nhwc_layout(d[0], d[1], d[2], d[3])
                           : nchw_layout(d[0], d[1], d[2], d[3]);
}

// Whether every layer reading layer `index` takes plain values (a dropout or a
// flatten), which a pooling then writes instead of reordering to them.
bool plain_consumers(const NetSpec& spec, int index) {
  bool any = false;
  for (const LayerSpec& l : spec.layers)
    for (int src : l.inputs)
      if (src == index) {
        if (l.kind != LayerKind::kDropout && l.kind != LayerKind::kFlatten) return false;
        any = true;
      }
  return any;
}

class PoolLayer final : public CpuLayer {
 public:
  PoolLayer(CpuPlan& plan, const LayerSpec& spec, int index, bool after_relu)
      : CpuLayer(plan, spec, index), after_relu_(after_relu) {}
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
    if (spec_.kind == LayerKind::kMaxPool && build_own_forward(src, w, od)) return;
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
    if (own_) return build_own_backward();
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
  // max_pool.h's forward, when it takes the input's layout and this CPU (false: it
  // does not, and oneDNN's pooling is built instead).
  bool build_own_forward(const memory& src, const Window& w, const dims& od) {
    if ((dt_ != dt::f32 && dt_ != dt::bf16) || w.dh != 1 || w.dw != 1) return false;
    const dims& id = in().shape;
    tag x_tag = tag::undef;
    if (!pool_input_tag(src.get_desc(), id, dt_, x_tag)) return false;
    x_layout_ = layout_of(x_tag, id);
    g_ = {id[0], id[1], id[2], id[3], od[2], od[3], w.kh, w.kw, w.sh, w.sw, w.ph, w.pw};
    if (!max_pool_supported(g_, x_layout_)) return false;
    // the input's layout, or plain for readers that want it
    const tag y_tag = plain_consumers(plan_.spec_, index_) ? tag::nchw : x_tag;
    y_layout_ = layout_of(y_tag, od);
    const memory::desc md(od, dt_, y_tag);
    if (training()) arg_.resize(static_cast<size_t>(max_pool_arg_size(g_, x_layout_)));
    own_ = true;
    // The relu's gradient too, in this backward: one pass over its values fewer.
    relu_grad_ = training() && after_relu_;
    if (relu_grad_) plan_.relu_grad_by_consumer_[static_cast<size_t>(spec_.inputs[0])] = true;
    src_ = src;
    out().mem = memory(md, eng());
    fwd.push_back({{}, {}, [this] {
                     const bool bf16 = dt_ == dt::bf16;
                     // the handles read here: nothing in the team may throw
                     const void* x = src_.get_data_handle();
                     void* y = out().mem.get_data_handle();
                     uint8_t* arg = arg_.empty() ? nullptr : arg_.data();
                     for_planes([&](int64_t lo, int64_t hi) {
                       max_pool_forward(g_, bf16, x, x_layout_, y, y_layout_, arg, relu_grad_, lo, hi);
                     });
                   }});
    return true;
  }
  void build_own_backward() {
    memory dd = plan_.diff_source(bwd, out(), out().mem.get_desc());
    Items post;
    memory ds = plan_.diff_target(post, in(), src_.get_desc());
    bwd.push_back({{}, {}, [this, dd, ds] {
                     const bool bf16 = dt_ == dt::bf16;
                     const void* dy = dd.get_data_handle();
                     void* dx = ds.get_data_handle();
                     for_planes([&](int64_t lo, int64_t hi) {
                       max_pool_backward(g_, bf16, dy, y_layout_, arg_.data(), dx, x_layout_, lo, hi);
                     });
                   }});
    for (auto& it : post) bwd.push_back(it);
  }

  // fn(lo, hi) over planes [lo, hi) across the plan's team: each plane counts as its
  // outputs, so that a pooling too small to share stays on one thread.
  template <typename Fn>
  void for_planes(const Fn& fn) const {
    const int64_t weight = std::max<int64_t>(1, g_.oh * g_.ow * x_layout_.block);
    plan_.for_chunks(max_pool_planes(g_, x_layout_) * weight, [&](int64_t lo, int64_t hi) {
      if (lo / weight < hi / weight) fn(lo / weight, hi / weight);
    });
  }

  bool after_relu_, own_ = false, relu_grad_ = false;
  MaxPoolGeometry g_;
  PoolLayout x_layout_, y_layout_;
  std::vector<uint8_t> arg_;
  memory src_;
  dnnl::algorithm algo_{};
  memory::desc src_md_;
  dnnlc::Geometry geo_;
  dims od_;
  dnnlc::PoolFwd::primitive_desc pd_;
  memory ws_, pool_dst_, flat4_, keep_;
};

}  // namespace

std::unique_ptr<CpuLayer> make_pool_layer(CpuPlan& plan, const LayerSpec& spec, int index, bool after_relu) {
  return std::make_unique<PoolLayer>(plan, spec, index, after_relu);
}

}  // namespace cohort::backend::cpu
