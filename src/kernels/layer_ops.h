// Element-wise and data-movement work of the layers that need no library primitive,
// written once for host and device: dropout from the counter-based RNG, the
// activations, sums, block copies (concat, flatten), layout and type conversions, the
// ResNet option-A shortcut, per-channel bias, weight layouts, fills, and the rows of
// the softmax cross-entropy. The CUDA backend launches them through kernels::for_each; the
// CPU backend runs the same functors (or, where it keeps its own vectorised loop, the
// same math: dropout's masks are kernels::dropout_factor's draws on either).
//
// Values are stored as S and computed in f32 through a codec C (kernels/reduce.h):
// float itself, or the 16-bit patterns of f16 and bf16. `accumulate` adds to the
// destination instead of overwriting it (a value whose gradient several consumers
// contribute to). Image values are NCHW or NHWC: `Nhwc` tells element positions apart.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/dropout.h"
#include "kernels/hd.h"
#include "kernels/reduce.h"
#include "kernels/softmax_xent.h"

namespace cohort::kernels {

using F32 = PlainCodec<float>;

template <typename S, typename C>
COHORT_HD void store(S* p, float v, bool accumulate) {
  *p = C::store(accumulate ? C::load(*p) + v : v);
}
COHORT_HD void store(float* p, float v, bool accumulate) { *p = accumulate ? *p + v : v; }

template <typename S = float, typename C = F32>
struct Fill {
  float value;
  COHORT_HD void operator()(int64_t i, S* x) const { x[i] = C::store(value); }
};

// a / b and a % b (a >= 0, b > 0), in 32 bits where both fit: a GPU divides int64 in
// a long software sequence, int32 in a few instructions.
struct DivMod {
  int64_t q, r;
};
COHORT_HD DivMod div_mod(int64_t a, int64_t b) {
  constexpr int64_t k32 = int64_t{1} << 32;
  if (a < k32 && b < k32) {
    const uint32_t a32 = static_cast<uint32_t>(a), b32 = static_cast<uint32_t>(b), q = a32 / b32;
    return {static_cast<int64_t>(q), static_cast<int64_t>(a32 - q * b32)};
  }
  return {a / b, a % b};
}

// Where element i of an image value sits in NCHW order (the order every device draws
// dropout masks in and flattens in): i itself for NCHW or [N, F] values, else the
// NCHW index of NHWC position i. c = channels, hw = height × width (0: NCHW).
COHORT_HD int64_t nchw_index(int64_t i, int64_t c, int64_t hw) {
  if (hw == 0) return i;
  const DivMod a = div_mod(i, c), b = div_mod(a.q, hw);  // channel a.r, pixel b.r, sample b.q
  return (b.q * c + a.r) * hw + b.r;
}
// The other way: where element i of an NCHW value sits in its NHWC form.
COHORT_HD int64_t nhwc_index(int64_t i, int64_t c, int64_t hw) {
  if (hw == 0) return i;
  const DivMod a = div_mod(i, hw), b = div_mod(a.q, c);  // pixel a.r, channel b.r, sample b.q
  return (b.q * hw + a.r) * c + b.r;
}

// y = x × dropout_factor(logical index of i).
template <typename S = float, typename C = F32>
struct DropoutForward {
  uint64_t stream, seed;
  float p;
  int64_t c = 0, hw = 0;  // NHWC values: channels and pixels; 0: NCHW or [N, F]
  COHORT_HD void operator()(int64_t i, S* y, const S* x) const {
    const uint64_t k = static_cast<uint64_t>(nchw_index(i, c, hw));
    y[i] = C::store(C::load(x[i]) * dropout_factor(k, stream, seed, p));
  }
};
template <typename S = float, typename C = F32>
struct DropoutBackward {
  uint64_t stream, seed;
  float p;
  bool accumulate;
  int64_t c = 0, hw = 0;
  COHORT_HD void operator()(int64_t i, S* dx, const S* dy) const {
    const uint64_t k = static_cast<uint64_t>(nchw_index(i, c, hw));
    store<S, C>(dx + i, C::load(dy[i]) * dropout_factor(k, stream, seed, p), accumulate);
  }
};

// The activations, forward from x and backward from x and y (relu and leaky relu with
// alpha: max(x, 0) + alpha·min(x, 0); elu: alpha·(eˣ − 1) below 0; tanh; sigmoid), as
// the CPU backend computes them.
enum class Act : uint8_t { kRelu, kElu, kTanh, kSigmoid };
COHORT_HD float act_forward(Act a, float alpha, float x) {
  switch (a) {
    case Act::kRelu:
      return x > 0.f ? x : alpha * x;
    case Act::kElu:
      return x > 0.f ? x : alpha * (expf(x) - 1.f);
    case Act::kTanh:
      return tanhf(x);
    case Act::kSigmoid:
      return 1.f / (1.f + expf(-x));
  }
  return x;
}
COHORT_HD float act_backward(Act a, float alpha, float x, float y, float g) {
  switch (a) {
    case Act::kRelu:
      return x > 0.f ? g : alpha * g;
    case Act::kElu:
      return x > 0.f ? g : g * alpha * expf(x);
    case Act::kTanh:
      return g * (1.f - y * y);
    case Act::kSigmoid:
      return g * y * (1.f - y);
  }
  return g;
}
template <typename S = float, typename C = F32>
struct ActForward {
  Act act;
  float alpha;
  COHORT_HD void operator()(int64_t i, S* y, const S* x) const {
    y[i] = C::store(act_forward(act, alpha, C::load(x[i])));
  }
};
template <typename S = float, typename C = F32>
struct ActBackward {
  Act act;
  float alpha;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, S* dx, const S* dy, const S* x, const S* y) const {
    store<S, C>(dx + i, act_backward(act, alpha, C::load(x[i]), C::load(y[i]), C::load(dy[i])), accumulate);
  }
};

// y = a + b (and y += c for more inputs, with CopyTo{true}).
template <typename S = float, typename C = F32>
struct Sum2 {
  COHORT_HD void operator()(int64_t i, S* y, const S* a, const S* b) const {
    y[i] = C::store(C::load(a[i]) + C::load(b[i]));
  }
};

// dst = (or +=) src, element-wise.
template <typename S = float, typename C = F32>
struct CopyTo {
  bool accumulate;
  COHORT_HD void operator()(int64_t i, S* dst, const S* src) const {
    if (accumulate)
      store<S, C>(dst + i, C::load(src[i]), true);
    else
      dst[i] = src[i];
  }
};

// dst = (or +=) src from one storage type to another, reordering NCHW ↔ NHWC on the way
// when asked (element i indexes the destination; c = channels, hw = pixels per
// channel): casts at a layer boundary, a cast value's gradient sent back, and values
// read out in the caller's layout.
enum class Reorder : uint8_t { kNone, kToNhwc, kToNchw };
template <typename D, typename DC, typename S, typename SC>
struct Convert {
  bool accumulate;
  Reorder reorder = Reorder::kNone;
  int64_t c = 0, hw = 0;
  COHORT_HD void operator()(int64_t i, D* dst, const S* src) const {
    const int64_t j = reorder == Reorder::kToNhwc   ? nchw_index(i, c, hw)
                      : reorder == Reorder::kToNchw ? nhwc_index(i, c, hw)
                                                    : i;
    store<D, DC>(dst + i, SC::load(src[j]), accumulate);
  }
};

// A block copy between pitched rows: element i is (row i / width, column i % width);
// dst[row·dst_pitch + col] = (or +=) src[row·src_pitch + col]. Concat writes each input
// into its channel range this way (NCHW: rows of C_i·H·W; NHWC: rows of C_i).
template <typename S = float, typename C = F32>
struct CopyRows {
  int64_t width, dst_pitch, src_pitch;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, S* dst, const S* src) const {
    const DivMod rc = div_mod(i, width);  // row rc.q, column rc.r
    S* d = dst + rc.q * dst_pitch + rc.r;
    const S s = src[rc.q * src_pitch + rc.r];
    if (accumulate)
      store<S, C>(d, C::load(s), true);
    else
      *d = s;
  }
};

// The ResNet option-A shortcut: y[n, c + pad, h, w] = x[n, c, s·h, s·w], the other
// channels 0 (element i indexes y); backward is its transpose (element i indexes dx;
// positions not sampled get 0). `nhwc` says how both are stored.
struct ShortcutGeometry {
  int64_t ci, hi, wi, co, ho, wo, stride, pad;
  bool nhwc = false;
  // The flat index of (n, c, h, w) in a value of c_ channels and h_ × w_ pixels.
  COHORT_HD int64_t at(int64_t n, int64_t c, int64_t h, int64_t w, int64_t c_, int64_t h_, int64_t w_) const {
    return nhwc ? ((n * h_ + h) * w_ + w) * c_ + c : ((n * c_ + c) * h_ + h) * w_ + w;
  }
  // (n, c, h, w) of flat index i in such a value.
  COHORT_HD void coords(int64_t i, int64_t c_, int64_t h_, int64_t w_, int64_t& n, int64_t& c, int64_t& h,
                        int64_t& w) const {
    if (nhwc) {
      const DivMod a = div_mod(i, c_), b = div_mod(a.q, w_), d = div_mod(b.q, h_);
      c = a.r, w = b.r, h = d.r, n = d.q;
    } else {
      const DivMod a = div_mod(i, w_), b = div_mod(a.q, h_), d = div_mod(b.q, c_);
      w = a.r, h = b.r, c = d.r, n = d.q;
    }
  }
};
template <typename S = float, typename C = F32>
struct ShortcutAForward {
  ShortcutGeometry g;
  COHORT_HD void operator()(int64_t i, S* y, const S* x) const {
    int64_t n, c, h, w;
    g.coords(i, g.co, g.ho, g.wo, n, c, h, w);
    const int64_t cx = c - g.pad;
    y[i] = cx >= 0 && cx < g.ci ? x[g.at(n, cx, h * g.stride, w * g.stride, g.ci, g.hi, g.wi)] : C::store(0.f);
  }
};
template <typename S = float, typename C = F32>
struct ShortcutABackward {
  ShortcutGeometry g;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, S* dx, const S* dy) const {
    int64_t n, c, h, w;
    g.coords(i, g.ci, g.hi, g.wi, n, c, h, w);
    float v = 0.f;
    if (h % g.stride == 0 && w % g.stride == 0 && h / g.stride < g.ho && w / g.stride < g.wo)
      v = C::load(dy[g.at(n, c + g.pad, h / g.stride, w / g.stride, g.co, g.ho, g.wo)]);
    store<S, C>(dx + i, v, accumulate);
  }
};

// y[.., c, ..] += b[c] for a value of `channels` channels: NCHW (hw = pixels per
// channel; 1 for [N, F]) or NHWC (hw = 0: the channel is the fastest index).
template <typename S = float, typename C = F32>
struct AddBias {
  int64_t channels, hw;
  COHORT_HD void operator()(int64_t i, S* y, const float* b) const {
    const int64_t c = div_mod(hw == 0 ? i : div_mod(i, hw).q, channels).r;
    y[i] = C::store(C::load(y[i]) + b[c]);
  }
};
// Conv weights: the f32 master in OIHW to the layout and type the convolution reads
// (OIHW, or OHWI for NHWC tensors: cuDNN's KRSC), element i indexing the destination;
// and a gradient in that layout back to OIHW f32 (element i indexing the OIHW one).
template <typename S = float, typename C = F32>
struct WeightsFromOihw {
  int64_t k, c, rs;  // out channels, in channels (per group), kernel pixels
  bool ohwi;
  // OHWI element (o, pos, ch) is OIHW element (o, ch, pos): an NHWC → NCHW index with
  // the kernel pixels as the image's (1×1 kernels: the same order).
  COHORT_HD void operator()(int64_t i, S* dst, const float* w) const {
    dst[i] = C::store(w[ohwi && rs > 1 ? nchw_index(i, c, rs) : i]);
  }
};
template <typename S = float, typename C = F32>
struct GradToOihw {
  int64_t k, c, rs;
  bool ohwi;
  COHORT_HD void operator()(int64_t i, float* dw, const S* g) const {
    dw[i] = C::load(g[ohwi && rs > 1 ? nhwc_index(i, c, rs) : i]);
  }
};

// One row (sample) of the softmax cross-entropy spread over `lanes` threads (a GPU warp),
// lane l taking classes l, l + lanes, …: each lane's part of the row's largest logit, of
// Σ exp(logit − max) and of the loss, writing its classes' grad_scale × (softmax −
// target) when grad is set. The caller combines the parts across the lanes between the
// calls (max, sum, sum); combined, they give softmax_xent_row's loss and gradient up to
// the order of the sums. A label outside [0, k) gives parts of 0 (the max part aside),
// zero gradients, and sets *bad_label.
struct SoftmaxXentLanes {
  const float* logits;
  const int32_t* labels;
  int64_t k;
  float smoothing;
  float* grad;  // null: the loss only
  float grad_scale;
  int32_t* bad_label;
  COHORT_HD bool good(int64_t row) const { return labels[row] >= 0 && labels[row] < k; }
  COHORT_HD float max_part(int64_t row, int lane, int lanes) const {
    const float* z = logits + row * k;
    float mx = -INFINITY;
    for (int64_t j = lane; j < k; j += lanes) mx = z[j] > mx ? z[j] : mx;
    return mx;
  }
  COHORT_HD double sum_part(int64_t row, int lane, int lanes, float mx) const {
    if (!good(row)) return 0.0;
    const float* z = logits + row * k;
    double sum = 0;
    for (int64_t j = lane; j < k; j += lanes) sum += std::exp(static_cast<double>(z[j] - mx));
    return sum;
  }
  COHORT_HD double loss_part(int64_t row, int lane, int lanes, float mx, double log_sum) const {
    const float* z = logits + row * k;
    float* g = grad ? grad + row * k : nullptr;
    if (!good(row)) {  // loss() reports it; the row sends no gradient
      if (lane == 0) *bad_label = 1;
      if (g)
        for (int64_t j = lane; j < k; j += lanes) g[j] = 0.f;
      return 0.0;
    }
    const XentTargets t = xent_targets(k, smoothing);
    const int64_t label = labels[row];
    double loss = 0;
    for (int64_t j = lane; j < k; j += lanes)
      loss += xent_term(z[j], mx, log_sum, j == label ? t.on : t.off, g ? g + j : nullptr, grad_scale);
    return loss;
  }
};

namespace cuda {
// Defined in src/kernels/cuda/layer_kernels.cu: one warp per row of `rows`. The loss
// form writes the rows' losses, summed in a fixed order (one block), to *loss_sum (0
// without rows); the gradient form writes f.grad (set) and sums nothing.
void launch_softmax_xent_loss(void* stream, int64_t rows, const SoftmaxXentLanes& f, double* loss_sum);
void launch_softmax_xent_grad(void* stream, int64_t rows, const SoftmaxXentLanes& f);
}  // namespace cuda

}  // namespace cohort::kernels
