// Element-wise reduction math shared by the collective engine's host loops, its MPI
// user operations (f16/bf16) and, through COHORT_HD, CUDA kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/hd.h"
#include "tensor/dtype.h"

namespace cohort::kernels {

COHORT_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

COHORT_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE binary16 <-> float, round to nearest even.
COHORT_HD float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    uint32_t e = 113;  // 127 - 15 + 1
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --e;
    }
    return bits_float(sign | (e << 23) | ((mant & 0x3ffu) << 13));
  }
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

COHORT_HD uint16_t float_to_half(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x7fffffu;
  int exp = static_cast<int>((x >> 23) & 0xffu);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  int e = exp - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct
  return static_cast<uint16_t>(h);
}

// bfloat16 <-> float, round to nearest even; NaN stays NaN.
COHORT_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

COHORT_HD uint16_t float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

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

template <typename S, typename C>
inline void combine_op(S* inout, const S* in, size_t n, Reduce op) {
  switch (op) {
    case Reduce::kSum:
      combine_loop<S, C>(inout, in, n, SumFn{});
      break;
    case Reduce::kMin:
      combine_loop<S, C>(inout, in, n, MinFn{});
      break;
    case Reduce::kMax:
      combine_loop<S, C>(inout, in, n, MaxFn{});
      break;
    case Reduce::kProd:
      combine_loop<S, C>(inout, in, n, ProdFn{});
      break;
  }
}

// inout = op(inout, in) elementwise for n elements of dtype t (host memory).
inline void combine(void* inout, const void* in, size_t n, DType t, Reduce op) {
  switch (t) {
    case DType::kF32:
      combine_op<float, PlainCodec<float>>(static_cast<float*>(inout), static_cast<const float*>(in), n, op);
      break;
    case DType::kF64:
      combine_op<double, PlainCodec<double>>(static_cast<double*>(inout), static_cast<const double*>(in), n, op);
      break;
    case DType::kI32:
      combine_op<int32_t, PlainCodec<int32_t>>(static_cast<int32_t*>(inout), static_cast<const int32_t*>(in), n, op);
      break;
    case DType::kI64:
      combine_op<int64_t, PlainCodec<int64_t>>(static_cast<int64_t*>(inout), static_cast<const int64_t*>(in), n, op);
      break;
    case DType::kU8:
      combine_op<uint8_t, PlainCodec<uint8_t>>(static_cast<uint8_t*>(inout), static_cast<const uint8_t*>(in), n, op);
      break;
    case DType::kF16:
      combine_op<uint16_t, F16Codec>(static_cast<uint16_t*>(inout), static_cast<const uint16_t*>(in), n, op);
      break;
    case DType::kBF16:
      combine_op<uint16_t, BF16Codec>(static_cast<uint16_t*>(inout), static_cast<const uint16_t*>(in), n, op);
      break;
  }
}

// Multiplies every element by `factor`. Floating types scale in their compute type;
// integer types scale in double and truncate toward zero (so an average of integers
// is the truncated quotient).
template <typename S, typename C, typename Compute>
inline void scale_loop(S* p, size_t n, double factor) {
  for (size_t i = 0; i < n; ++i) p[i] = C::store(static_cast<Compute>(static_cast<double>(C::load(p[i])) * factor));
}

inline void scale(void* data, size_t n, DType t, double factor) {
  if (factor == 1.0) return;
  switch (t) {
    case DType::kF32: {
      float* p = static_cast<float*>(data);
      float f = static_cast<float>(factor);
      for (size_t i = 0; i < n; ++i) p[i] *= f;
      break;
    }
    case DType::kF64: {
      double* p = static_cast<double*>(data);
      for (size_t i = 0; i < n; ++i) p[i] *= factor;
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
