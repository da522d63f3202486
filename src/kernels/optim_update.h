// Element-wise optimizer updates, written once for host and device (COHORT_HD): the CPU
// optimizer loops over them, a CUDA kernel calls the same operator(), so the CPU tests
// cover the GPU math. Each functor updates element i of a parameter in place from its
// gradient and per-element state; per-tensor scalars (lr, bias corrections, the LARS
// trust ratio) are computed once per step by the caller.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/hd.h"

namespace cohort::kernels {

// What an update reads from memory rather than from its arguments where one launch (a
// captured CUDA graph) serves every step: the step's learning rate and Adam's bias
// corrections, the inverse of the loss scale, and the count of unscaled gradients that
// are inf or NaN (an update skips the step when it is not zero).
struct StepValues {
  float lr = 0.f;
  float bias1 = 1.f, bias2 = 1.f;
  float inv_scale = 1.f;
  uint32_t nonfinite = 0;
};

// Writes a step's values (one element).
struct SetStepValues {
  StepValues v;
  COHORT_HD void operator()(int64_t, StepValues* out) const { *out = v; }
};

// SGD with optional momentum, Nesterov momentum and L2 weight decay, in PyTorch's
// formulation: g += wd·w; v = μ·v + g; step = nesterov ? g + μ·v : v; w -= lr·step.
// With momentum 0 the velocity is neither read nor written (it may be null).
// With `step` set, lr is step->lr and nothing changes when step->nonfinite is not zero.
struct SgdUpdate {
  float lr;
  float momentum;
  float weight_decay;
  bool nesterov;
  const StepValues* step = nullptr;

  COHORT_HD void operator()(int64_t i, float* w, const float* g, float* velocity) const {
    float rate = lr;
    if (step) {
      if (step->nonfinite != 0) return;
      rate = step->lr;
    }
    const float wi = w[i];  // read once, before the stores (a host loop then keeps it in a register)
    float d = g[i] + weight_decay * wi;
    if (momentum != 0.0f) {
      float v = momentum * velocity[i] + d;
      velocity[i] = v;
      d = nesterov ? d + momentum * v : v;
    }
    w[i] = wi - rate * d;
  }
};

// Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019). Adam adds wd·w to the
// gradient (L2); AdamW decays the weight directly, w -= lr·wd·w, before the Adam step.
// bias1 = 1 − β1^t and bias2 = 1 − β2^t for the step t (1-based) being taken. With
// `step` set, lr, bias1 and bias2 are step's, and a step with non-finite gradients
// changes nothing.
struct AdamUpdate {
  float lr;
  float beta1;
  float beta2;
  float epsilon;
  float weight_decay;
  bool decoupled;  // true: AdamW
  float bias1;
  float bias2;
  const StepValues* step = nullptr;

  COHORT_HD void operator()(int64_t i, float* w, const float* g, float* m, float* v) const {
    float rate = lr, b1 = bias1, b2 = bias2;
    if (step) {
      if (step->nonfinite != 0) return;
      rate = step->lr;
      b1 = step->bias1;
      b2 = step->bias2;
    }
    float wi = w[i];
    float gi = g[i];
    if (decoupled) {
      wi -= rate * weight_decay * wi;
    } else {
      gi += weight_decay * wi;
    }
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float m_hat = mi / b1;
    float v_hat = vi / b2;
    w[i] = wi - rate * m_hat / (sqrtf(v_hat) + epsilon);
  }
};

// LARS (You et al. 2017, Algorithm 1) once the layer's local learning rate is known:
// v = μ·v + local_lr·(g + wd·w); w -= v, with local_lr = lr × trust ratio
// (see lars_trust_ratio).
struct LarsUpdate {
  float local_lr;
  float momentum;
  float weight_decay;

  COHORT_HD void operator()(int64_t i, float* w, const float* g, float* velocity) const {
    const float wi = w[i];
    float v = momentum * velocity[i] + local_lr * (g[i] + weight_decay * wi);
    velocity[i] = v;
    w[i] = wi - v;
  }
};

// η‖w‖ / (‖∇w‖ + β‖w‖); 1 when either norm is zero (a fresh zero-initialised bias, or
// a parameter that received no gradient), so such layers fall back to the global lr.
COHORT_HD double lars_trust_ratio(double w_norm, double g_norm, double eta, double weight_decay) {
  if (w_norm <= 0.0 || g_norm <= 0.0) return 1.0;
  return eta * w_norm / (g_norm + weight_decay * w_norm);
}

// Adds a gradient into an accumulator (backward_passes_per_step), scaled by `scale`.
struct AccumulateScaled {
  float scale;
  COHORT_HD void operator()(int64_t i, float* acc, const float* g) const { acc[i] += scale * g[i]; }
};

// Multiplies in place (averaging over ranks, Horovod's gradient_predivide_factor).
struct Scale {
  float factor;
  COHORT_HD void operator()(int64_t i, float* x) const { x[i] *= factor; }
};

}  // namespace cohort::kernels

namespace cohort::kernels {

// Sets every element to zero (gradients of a step without valid rows, fresh sums).
struct Zero {
  COHORT_HD void operator()(int64_t i, float* x) const { x[i] = 0.0f; }
};

// Loss scaling as a reduction map: g[i] *= inv_scale, and 1 when the result is inf or
// NaN (an overflow in the f16 backward pass), else 0; summed over a gradient with
// kernels::reduce_into, a non-zero count skips the step.
// With `step` set, the inverse scale is step->inv_scale.
struct UnscaleCount {
  float* g;
  float inv_scale;
  const StepValues* step = nullptr;
  COHORT_HD uint32_t operator()(int64_t i) const {
    const float v = g[i] * (step ? step->inv_scale : inv_scale);
    g[i] = v;
    return v - v == 0.0f ? 0u : 1u;  // inf − inf and NaN − NaN are NaN
  }
};

// x[i]² in f64, summed for the LARS norms.
struct SquareF64 {
  const float* x;
  COHORT_HD double operator()(int64_t i) const { return static_cast<double>(x[i]) * static_cast<double>(x[i]); }
};

// The combination of reduce_into's sums (kSum: a GPU adds a block's sum to the total
// with its atomic add, and not at all where the sum is zero).
struct Plus {
  static constexpr bool kSum = true;
  template <typename T>
  COHORT_HD T operator()(T a, T b) const {
    return a + b;
  }
};

}  // namespace cohort::kernels
