// Element-wise reduction math shared by the collective engine's host loops, its MPI
// user operations (f16/bf16) and, through COHORT_HD, CUDA kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/half.h"
#include "kernels/hd.h"
#include "tensor/dtype.h"

namespace cohort::kernels {

enum class Reduce : uint8_t { kSum, kMin, kMax, kProd };

// The combining functors, applied in a compute type (float for f16/bf16).
struct SumFn {
  template <typename T>
  COHORT_HD T operator()(T a, T b) const {
    return static_cast<T>(a + b);
  }
};
struct MinFn {
  template <typename T>
  COHORT_HD T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};
struct MaxFn {
  template <typename T>
  COHORT_HD T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct ProdFn {
  template <typename T>
  COHORT_HD T operator()(T a, T b) const {
    return static_cast<T>(a * b);
  }
};

// Storage <-> compute conversions per dtype.
struct F16Codec {
  COHORT_HD static float load(uint16_t v) { return half_to_float(v); }
  COHORT_HD static uint16_t store(float v) { return float_to_half(v); }
};
struct BF16Codec {
  COHORT_HD static float load(uint16_t v) { return bf16_to_float(v); }
  COHORT_HD static uint16_t store(float v) { return float_to_bf16(v); }
};
template <typename T>
struct PlainCodec {
  COHORT_HD static T load(T v) { return v; }
  COHORT_HD static T store(T v) { return v; }
};

// inout[i] = fn(inout[i], in[i]) for storage type S through codec C.
template <typename S, typename C, typename Fn>
inline void combine_loop(S* inout, const S* in, size_t n, Fn fn) {
  for (size_t i = 0; i < n; ++i) inout[i] = C::store(fn(C::load(inout[i]), C::load(in[i])));
}

// out[i] = fn(a[i], b[i]); out == a runs combine_loop (whose aliasing the compiler
// knows, so it vectorizes without a run-time overlap check).
template <typename S, typename C, typename Fn>
inline void combine_to_loop(S* out, const S* a, const S* b, size_t n, Fn fn) {
  if (out == a) return combine_loop<S, C>(out, b, n, fn);
  for (size_t i = 0; i < n; ++i) out[i] = C::store(fn(C::load(a[i]), C::load(b[i])));
}

template <typename S, typename C>
inline void combine_op(S* out, const S* a, const S* b, size_t n, Reduce op) {
  switch (op) {
    case Reduce::kSum:
      combine_to_loop<S, C>(out, a, b, n, SumFn{});
      break;
    case Reduce::kMin:
      combine_to_loop<S, C>(out, a, b, n, MinFn{});
      break;
    case Reduce::kMax:
      combine_to_loop<S, C>(out, a, b, n, MaxFn{});
      break;
    case Reduce::kProd:
      combine_to_loop<S, C>(out, a, b, n, ProdFn{});
      break;
  }
}

template <typename S, typename C>
inline void combine_op(void* out, const void* a, const void* b, size_t n, Reduce op) {
  combine_op<S, C>(static_cast<S*>(out), static_cast<const S*>(a), static_cast<const S*>(b), n, op);
}

// out = op(a, b) elementwise for n elements of dtype t (host memory); out may be a.
inline void combine_to(void* out, const void* a, const void* b, size_t n, DType t, Reduce op) {
  switch (t) {
    case DType::kF32:
      combine_op<float, PlainCodec<float>>(out, a, b, n, op);
      break;
    case DType::kF64:
      combine_op<double, PlainCodec<double>>(out, a, b, n, op);
      break;
    case DType::kI32:
      combine_op<int32_t, PlainCodec<int32_t>>(out, a, b, n, op);
      break;
    case DType::kI64:
      combine_op<int64_t, PlainCodec<int64_t>>(out, a, b, n, op);
      break;
    case DType::kU8:
      combine_op<uint8_t, PlainCodec<uint8_t>>(out, a, b, n, op);
      break;
    case DType::kF16:
      combine_op<uint16_t, F16Codec>(out, a, b, n, op);
      break;
    case DType::kBF16:
      combine_op<uint16_t, BF16Codec>(out, a, b, n, op);
      break;
  }
}

// inout = op(inout, in) elementwise for n elements of dtype t (host memory).
inline void combine(void* inout, const void* in, size_t n, DType t, Reduce op) {
  combine_to(inout, inout, in, n, t, op);
}

// One element times `factor`, as scale() applies it; the CUDA kernels of the NCCL
// transport apply the same functors. Floating types scale in their compute type;
// integer types scale in double and truncate toward zero (so an average of integers
// is the truncated quotient).
template <typename S, typename C, typename Compute>
struct ScaleFn {
  double factor;
  COHORT_HD S operator()(S v) const { return C::store(static_cast<Compute>(static_cast<double>(C::load(v)) * factor)); }
};
template <typename T>
struct ScalePlainFn {  // f32 and f64: multiply in the type itself
  T factor;
  COHORT_HD T operator()(T v) const { return v * factor; }
};

// Multiplies every element by `factor` (see ScaleFn).
template <typename S, typename C, typename Compute>
inline void scale_loop(S* p, size_t n, double factor) {
  ScaleFn<S, C, Compute> fn{factor};
  for (size_t i = 0; i < n; ++i) p[i] = fn(p[i]);
}

inline void scale(void* data, size_t n, DType t, double factor) {
  if (factor == 1.0) return;
  switch (t) {
    case DType::kF32: {
      float* p = static_cast<float*>(data);
      ScalePlainFn<float> fn{static_cast<float>(factor)};
      for (size_t i = 0; i < n; ++i) p[i] = fn(p[i]);
      break;
    }
    case DType::kF64: {
      double* p = static_cast<double*>(data);
      ScalePlainFn<double> fn{factor};
      for (size_t i = 0; i < n; ++i) p[i] = fn(p[i]);
      break;
    }
    case DType::kI32:
      scale_loop<int32_t, PlainCodec<int32_t>, int32_t>(static_cast<int32_t*>(data), n, factor);
      break;
    case DType::kI64:
      scale_loop<int64_t, PlainCodec<int64_t>, int64_t>(static_cast<int64_t*>(data), n, factor);
      break;
    case DType::kU8:
      scale_loop<uint8_t, PlainCodec<uint8_t>, uint8_t>(static_cast<uint8_t*>(data), n, factor);
      break;
    case DType::kF16:
      scale_loop<uint16_t, F16Codec, float>(static_cast<uint16_t*>(data), n, factor);
      break;
    case DType::kBF16:
      scale_loop<uint16_t, BF16Codec, float>(static_cast<uint16_t*>(data), n, factor);
      break;
  }
}

}  // namespace cohort::kernels
