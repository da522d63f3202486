// Pooling: max, average and global average.
#include "backend/cpu/plan.h"

namespace cohort::backend::cpu {
namespace {

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

}  // namespace

std::unique_ptr<CpuLayer> make_pool_layer(CpuPlan& plan, const LayerSpec& spec, int index) {
  return std::make_unique<PoolLayer>(plan, spec, index);
}

}  // namespace cohort::backend::cpu
