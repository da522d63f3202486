// The oneDNN CPU backend's plan: every primitive, reorder and buffer of a plan is
// created in compile(); a step only sets the input handle and executes the lists.
// Tensors between layers stay in whatever (blocked) layout the primitives chose; only
// parameters and gradients are converted to and from their plain layouts. At bf16,
// layers compute and pass bf16 tensors (backend/precision.h); parameters are cast
// from their f32 masters by the reorder that blocks them, and weight gradients come
// out of oneDNN in f32.
//
// The layers live one family per file (weighted_layers.cc, norm_layers.cc,
// pool_layers.cc, eltwise_layers.cc, shape_layers.cc, loss_layer.cc); fusion.cc decides
// which relus their producers apply; plan.cc builds and runs the lists.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/dnnl_compat.h"
#include "core/status.h"
#include "kernels/for_each.h"

namespace cohort::backend::cpu {

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

memory::desc plain_md(const dims& d, dt type = dt::f32, Layout layout = Layout::kNCHW);
inline memory::desc any_md(const dims& d, dt type) { return {d, type, tag::any}; }
dt to_dnnl(DType t);
inline DType from_dnnl(dt t) { return t == dt::bf16 ? DType::kBF16 : t == dt::f16 ? DType::kF16 : DType::kF32; }
// `m` itself when it holds `type`; otherwise the plain layout of its shape in `type`
// (a value crossing into a layer of another precision is converted by one reorder).
memory::desc like(const memory::desc& m, dt type);
[[noreturn]] void dnnl_fail(const LayerSpec& l, const dnnl::error& e);
// oneDNN's geometry of a window from input dims `in` to output dims `out`.
dnnlc::Geometry geometry(const Window& w, const dims& in, const dims& out);
inline dnnl::prop_kind fwd_prop(bool training) {
  return training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
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

// What the fusion pass decided for each layer (fusion.cc).
struct Fusion {
  std::vector<int> consumers;       // layers reading each layer's output
  std::vector<bool> fused;          // a batch norm, conv or dense applies the relu after it
  std::vector<bool> relu_in_place;  // a relu that may overwrite its input
  // a max pooling whose input is a relu that a conv or dense applied, read by it alone:
  // the pooling may apply the relu's gradient too (relu_grad_by_consumer_)
  std::vector<bool> pool_after_relu;
};
Fusion plan_fusion(const NetSpec& spec);

class CpuPlan final : public Plan {
 public:
  CpuPlan(const NetSpec& spec, Bindings bind, const PlanOptions& opt, int threads);

  void forward(const Tensor& input, const Tensor& labels, uint64_t step, const Stream& stream) override;
  float loss() override { return loss_; }
  void backward(const Tensor& output_grad, const GradReady& ready, const Stream& stream) override;
  void read(int index, const Tensor& dst) override;
  void read_input_grad(const Tensor& dst) override;
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
  Bindings bind_;
  PlanOptions opt_;
  const int32_t* labels_ = nullptr;
  uint64_t step_ = 0;
  float loss_ = 0;
  const GradReady* ready_ = nullptr;
  float loss_scale_ = 1.f;
  memory out_grad_;
  // Relus whose consumer applies their gradient (set by a max pooling as it builds its
  // forward; such a relu's backward hands its gradient on unchanged).
  std::vector<bool> relu_grad_by_consumer_;
  // 1x1 convolutions whose backward is matrix products (PointwiseBackward), counted as
  // they build it.
  int matmul_backwards_ = 0;

  float* param_data(int param) const { return bind_.params.at(static_cast<size_t>(param)).data_as<float>(); }
  float* grad_data(int param) const { return bind_.grads.at(static_cast<size_t>(param)).data_as<float>(); }
  float* state_data(int state) const { return bind_.states.at(static_cast<size_t>(state)).data_as<float>(); }

  // A reorder from `from` to `to` (layouts and data types may both differ).
  static void reorder(Items& items, const memory& from, const memory& to) {
    items.push_back({dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, {}, true});
  }
  // `m`'s data in layout `want`: m itself, or a copy made by a reorder in `items`.
  memory take(Items& items, const memory& m, const memory::desc& want);
  // m's buffer seen as md (other dims or strides over the same bytes), its handle set
  // from m's by an item in `items` each time they run (m's may change between steps).
  memory view(Items& items, const memory& m, const memory::desc& md);
  // Memory a backward primitive writes v's gradient into; later contributions are
  // added by reorders appended to `after`.
  memory diff_target(Items& after, Val& v, const memory::desc& md);
  // Hands `m` to v as (part of) its gradient; aliases m when v has none yet.
  void deliver(Items& items, Val& v, const memory& m, bool may_alias);
  // v's gradient in layout md (reordered into a buffer when it differs).
  memory diff_source(Items& before, Val& v, const memory::desc& md);
  // Plain copy of a parameter in layout md, refreshed at every forward.
  memory param_in(Items& items, int param, const memory::desc& plain, const memory::desc& md);
  // Where a primitive writes gradient `param` (plain memory directly when the layout
  // is plain), followed by the reorder and the ready call.
  memory grad_out(Items& after, int param, const memory::desc& plain, const memory::desc& md);
  void ready(Items& items, int param);
  static DType dtype(const memory& m) { return from_dnnl(dnnlc::dtype_of(m.get_desc())); }
  static int64_t elems(const memory& m) { return static_cast<int64_t>(m.get_desc().get_size() / dtype_size(dtype(m))); }
  // fn(begin, end) over [0, n), split across the plan's OpenMP team (the same team as
  // oneDNN's primitives, so no second pool competes with its workers). fn must not throw.
  template <typename Fn>
  void for_chunks(int64_t n, const Fn& fn) const {
    kernels::parallel_chunks(loop_threads_, n, fn);
  }

 private:
  void accumulate(Items& items, const memory& from, Val& v);
  void run(const Items& items, bool backward);
  void execute(const Item& it);
  void set_threads() const;
  void copy_out(const memory& m, const dims& shape, const Tensor& dst, const char* what);
  void build();
  std::unique_ptr<CpuLayer> make_layer(size_t i, const Fusion& fusion);

  int threads_;
  bool profiling_ = false;
  PlanProfile profile_;
  int loop_threads_ = 1;  // the OpenMP team of the element-wise loops
  std::vector<std::unique_ptr<CpuLayer>> layers_;
  Items fwd_, bwd_;
};

// The layer families (one file each).
std::unique_ptr<CpuLayer> make_input_layer(CpuPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CpuLayer> make_conv_layer(CpuPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CpuLayer> make_dense_layer(CpuPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CpuLayer> make_batch_norm_layer(CpuPlan& plan, const LayerSpec& spec, int index, bool fuse_relu);
std::unique_ptr<CpuLayer> make_lrn_layer(CpuPlan& plan, const LayerSpec& spec, int index);
// after_relu: Fusion::pool_after_relu.
std::unique_ptr<CpuLayer> make_pool_layer(CpuPlan& plan, const LayerSpec& spec, int index, bool after_relu);
// in_place: overwrite the input; done_by_input: the producer already applied this
// relu (a conv or dense post-op), so only backward is left (in place, from dst).
std::unique_ptr<CpuLayer> make_activation_layer(CpuPlan& plan, const LayerSpec& spec, int index, bool in_place,
                                                bool done_by_input);
// A layer whose work another layer does (a relu fused into the batch norm before it).
std::unique_ptr<CpuLayer> make_pass_layer(CpuPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CpuLayer> make_dropout_layer(CpuPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CpuLayer> make_add_layer(CpuPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CpuLayer> make_concat_layer(CpuPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CpuLayer> make_flatten_layer(CpuPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CpuLayer> make_shortcut_a_layer(CpuPlan& plan, const LayerSpec& spec, int index);
std::unique_ptr<CpuLayer> make_softmax_xent_layer(CpuPlan& plan, const LayerSpec& spec, int index);

}  // namespace cohort::backend::cpu
