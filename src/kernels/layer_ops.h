// Element-wise and data-movement work of the layers that need no library primitive,
// written once for host and device: dropout from the counter-based RNG, leaky relu,
// sums, block copies (concat, flatten), the ResNet option-A shortcut, fills, and the
// rows of the softmax cross-entropy. The CUDA backend launches them through
// kernels::for_each; the CPU backend runs the same functors (or, where it keeps its own
// vectorised loop, the same math: dropout's masks are kernels::dropout_factor's draws
// on either). `accumulate` adds to the destination instead of overwriting it (a value
// whose gradient several consumers contribute to).
#pragma once

#include <cstdint>

#include "kernels/dropout.h"
#include "kernels/hd.h"
#include "kernels/softmax_xent.h"

namespace cohort::kernels {

COHORT_HD void store(float* p, float v, bool accumulate) { *p = accumulate ? *p + v : v; }

struct Fill {
  float value;
  COHORT_HD void operator()(int64_t i, float* x) const { x[i] = value; }
};

// y = x × dropout_factor(i): element i of the plain (NCHW or [N, F]) tensor, so that
// any device draws the same mask for the same (seed, stream).
struct DropoutForward {
  uint64_t stream, seed;
  float p;
  COHORT_HD void operator()(int64_t i, float* y, const float* x) const {
    y[i] = x[i] * dropout_factor(static_cast<uint64_t>(i), stream, seed, p);
  }
};
struct DropoutBackward {
  uint64_t stream, seed;
  float p;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, float* dx, const float* dy) const {
    store(dx + i, dy[i] * dropout_factor(static_cast<uint64_t>(i), stream, seed, p), accumulate);
  }
};

// max(x, 0) + alpha·min(x, 0), and its gradient from the input.
struct LeakyReluForward {
  float alpha;
  COHORT_HD void operator()(int64_t i, float* y, const float* x) const { y[i] = x[i] > 0.f ? x[i] : alpha * x[i]; }
};
struct LeakyReluBackward {
  float alpha;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, float* dx, const float* dy, const float* x) const {
    store(dx + i, x[i] > 0.f ? dy[i] : alpha * dy[i], accumulate);
  }
};

// y = a + b (and y += c for more inputs).
struct Sum2 {
  COHORT_HD void operator()(int64_t i, float* y, const float* a, const float* b) const { y[i] = a[i] + b[i]; }
};

// dst = (or +=) src, element-wise.
struct CopyTo {
  bool accumulate;
  COHORT_HD void operator()(int64_t i, float* dst, const float* src) const { store(dst + i, src[i], accumulate); }
};

// A block copy between pitched rows: element i is (row i / width, column i % width);
// dst[row·dst_pitch + col] = (or +=) src[row·src_pitch + col]. Concat writes each input
// into its channel range this way (NCHW: rows of C_i·H·W; NHWC: rows of C_i).
struct CopyRows {
  int64_t width, dst_pitch, src_pitch;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, float* dst, const float* src) const {
    const int64_t row = i / width, col = i % width;
    store(dst + row * dst_pitch + col, src[row * src_pitch + col], accumulate);
  }
};

// NCHW ↔ NHWC for a batch [n, c, h, w]: element i indexes the destination.
struct ToNhwc {  // dst NHWC, src NCHW
  int64_t c, hw;
  COHORT_HD void operator()(int64_t i, float* dst, const float* src) const {
    const int64_t ch = i % c, rest = i / c, pos = rest % hw, n = rest / hw;
    dst[i] = src[(n * c + ch) * hw + pos];
  }
};
struct ToNchw {  // dst NCHW, src NHWC
  int64_t c, hw;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, float* dst, const float* src) const {
    const int64_t pos = i % hw, rest = i / hw, ch = rest % c, n = rest / c;
    store(dst + i, src[(n * hw + pos) * c + ch], accumulate);
  }
};

// The ResNet option-A shortcut on NCHW: y[n, c + pad, h, w] = x[n, c, s·h, s·w], the
// other channels 0 (element i indexes y); backward is its transpose (element i
// indexes dx; positions not sampled get 0).
struct ShortcutAForward {
  int64_t ci, hi, wi, co, ho, wo, stride, pad;
  COHORT_HD void operator()(int64_t i, float* y, const float* x) const {
    const int64_t w = i % wo, h = (i / wo) % ho, c = (i / (wo * ho)) % co, n = i / (wo * ho * co);
    const int64_t cx = c - pad;
    y[i] = cx >= 0 && cx < ci ? x[((n * ci + cx) * hi + h * stride) * wi + w * stride] : 0.f;
  }
};
struct ShortcutABackward {
  int64_t ci, hi, wi, co, ho, wo, stride, pad;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, float* dx, const float* dy) const {
    const int64_t w = i % wi, h = (i / wi) % hi, c = (i / (wi * hi)) % ci, n = i / (wi * hi * ci);
    float v = 0.f;
    if (h % stride == 0 && w % stride == 0 && h / stride < ho && w / stride < wo)
      v = dy[((n * co + c + pad) * ho + h / stride) * wo + w / stride];
    store(dx + i, v, accumulate);
  }
};

// One row (sample) of the softmax cross-entropy: its loss into row_loss[i] and, when
// grad is set, grad_scale × (softmax − target) into its gradient row. A label outside
// [0, k) sets *bad_label and leaves the row's loss at 0.
struct SoftmaxXentRows {
  const float* logits;
  const int32_t* labels;
  int64_t k;
  float smoothing;
  float* grad;  // null in forward
  float grad_scale;
  float* row_loss;
  int32_t* bad_label;
  COHORT_HD void operator()(int64_t i) const {
    const int64_t label = labels[i];
    if (label < 0 || label >= k) {  // loss() reports it; the row sends no gradient
      *bad_label = 1;
      if (row_loss) row_loss[i] = 0.f;
      if (grad)
        for (int64_t j = 0; j < k; ++j) grad[i * k + j] = 0.f;
      return;
    }
    const float l = softmax_xent_row(logits + i * k, k, label, smoothing, grad ? grad + i * k : nullptr, grad_scale);
    if (row_loss) row_loss[i] = l;
  }
};

// The loss of row i as a reduction map (forward): the rows' sum over the batch.
struct SoftmaxXentLoss {
  const float* logits;
  const int32_t* labels;
  int64_t k;
  float smoothing;
  int32_t* bad_label;
  COHORT_HD double operator()(int64_t i) const {
    const int64_t label = labels[i];
    if (label < 0 || label >= k) {
      *bad_label = 1;
      return 0.0;
    }
    return softmax_xent_row(logits + i * k, k, label, smoothing, nullptr, 0.f);
  }
};

}  // namespace cohort::kernels
