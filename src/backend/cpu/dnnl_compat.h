// The oneDNN calls of the CPU backend that differ between oneDNN 2.x (operation
// descriptors: `F::desc`, then `F::primitive_desc(desc, engine)`) and 3.x (primitive
// descriptors built directly from the engine and the shapes). The backend has one
// code path and calls these; each returns the primitive descriptor of either version.
// Batch norm differs in substance too: 2.x takes scale and shift packed in one [2, C]
// tensor (its backward cannot use them apart), 3.x takes them as two [C] tensors.
#pragma once

#include <vector>

#include <dnnl.hpp>

#if !defined(DNNL_VERSION_MAJOR) || DNNL_VERSION_MAJOR < 2
#  error "cohort's CPU backend needs oneDNN 2.x or 3.x"
#endif

namespace cohort::backend::dnnlc {

using dnnl::memory;
using md = dnnl::memory::desc;
using dnnl::algorithm;
using dnnl::engine;
using dnnl::primitive_attr;
using dnnl::prop_kind;

constexpr bool kV3 = DNNL_VERSION_MAJOR >= 3;

// Convolution and pooling geometry in oneDNN's terms (dilation 0 = dense).
struct Geometry {
  memory::dims strides, kernel, dilation, pad_l, pad_r;
};

inline memory::dims dims_of(const md& d) {
#if DNNL_VERSION_MAJOR >= 3
  return d.get_dims();
#else
  return d.dims();
#endif
}

inline memory::data_type dtype_of(const md& d) {
#if DNNL_VERSION_MAJOR >= 3
  return d.get_data_type();
#else
  return d.data_type();
#endif
}

inline void append_eltwise(dnnl::post_ops& po, algorithm alg, float alpha, float beta) {
#if DNNL_VERSION_MAJOR >= 3
  po.append_eltwise(alg, alpha, beta);
#else
  po.append_eltwise(1.f, alg, alpha, beta);
#endif
}

// ---- convolution ----
using ConvFwd = dnnl::convolution_forward;
using ConvBwdData = dnnl::convolution_backward_data;
using ConvBwdWeights = dnnl::convolution_backward_weights;

inline ConvFwd::primitive_desc conv_forward(const engine& e, prop_kind pk, const md& src, const md& w, const md* bias,
                                            const md& dst, const Geometry& g, const primitive_attr& attr) {
  const algorithm a = algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
  if (bias) return {e, pk, a, src, w, *bias, dst, g.strides, g.dilation, g.pad_l, g.pad_r, attr};
  return {e, pk, a, src, w, dst, g.strides, g.dilation, g.pad_l, g.pad_r, attr};
#else
  if (bias) return {ConvFwd::desc(pk, a, src, w, *bias, dst, g.strides, g.dilation, g.pad_l, g.pad_r), attr, e};
  return {ConvFwd::desc(pk, a, src, w, dst, g.strides, g.dilation, g.pad_l, g.pad_r), attr, e};
#endif
}

inline ConvBwdData::primitive_desc conv_backward_data(const engine& e, const md& diff_src, const md& w,
                                                      const md& diff_dst, const Geometry& g,
                                                      const ConvFwd::primitive_desc& hint) {
  const algorithm a = algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
  return {e, a, diff_src, w, diff_dst, g.strides, g.dilation, g.pad_l, g.pad_r, hint};
#else
  return {ConvBwdData::desc(a, diff_src, w, diff_dst, g.strides, g.dilation, g.pad_l, g.pad_r), e, hint};
#endif
}

inline ConvBwdWeights::primitive_desc conv_backward_weights(const engine& e, const md& src, const md& diff_w,
                                                            const md* diff_bias, const md& diff_dst, const Geometry& g,
                                                            const ConvFwd::primitive_desc& hint) {
  const algorithm a = algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
  if (diff_bias) return {e, a, src, diff_w, *diff_bias, diff_dst, g.strides, g.dilation, g.pad_l, g.pad_r, hint};
  return {e, a, src, diff_w, diff_dst, g.strides, g.dilation, g.pad_l, g.pad_r, hint};
#else
  if (diff_bias)
    return {ConvBwdWeights::desc(a, src, diff_w, *diff_bias, diff_dst, g.strides, g.dilation, g.pad_l, g.pad_r), e,
            hint};
  return {ConvBwdWeights::desc(a, src, diff_w, diff_dst, g.strides, g.dilation, g.pad_l, g.pad_r), e, hint};
#endif
}

// ---- inner product ----
using IpFwd = dnnl::inner_product_forward;
using IpBwdData = dnnl::inner_product_backward_data;
using IpBwdWeights = dnnl::inner_product_backward_weights;

inline IpFwd::primitive_desc ip_forward(const engine& e, prop_kind pk, const md& src, const md& w, const md* bias,
                                        const md& dst, const primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  if (bias) return {e, pk, src, w, *bias, dst, attr};
  return {e, pk, src, w, dst, attr};
#else
  if (bias) return {IpFwd::desc(pk, src, w, *bias, dst), attr, e};
  return {IpFwd::desc(pk, src, w, dst), attr, e};
#endif
}

inline IpBwdData::primitive_desc ip_backward_data(const engine& e, const md& diff_src, const md& w, const md& diff_dst,
                                                  const IpFwd::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, diff_src, w, diff_dst, hint};
#else
  return {IpBwdData::desc(diff_src, w, diff_dst), e, hint};
#endif
}

inline IpBwdWeights::primitive_desc ip_backward_weights(const engine& e, const md& src, const md& diff_w,
                                                        const md* diff_bias, const md& diff_dst,
                                                        const IpFwd::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  if (diff_bias) return {e, src, diff_w, *diff_bias, diff_dst, hint};
  return {e, src, diff_w, diff_dst, hint};
#else
  if (diff_bias) return {IpBwdWeights::desc(src, diff_w, *diff_bias, diff_dst), e, hint};
  return {IpBwdWeights::desc(src, diff_w, diff_dst), e, hint};
#endif
}

// ---- matrix product ----
using Matmul = dnnl::matmul;

inline Matmul::primitive_desc matmul(const engine& e, const md& a, const md& b, const md& c) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, a, b, c};
#else
  return {Matmul::desc(a, b, c), e};
#endif
}

// ---- batch normalization ----
using BnFwd = dnnl::batch_normalization_forward;
using BnBwd = dnnl::batch_normalization_backward;

// Whether scale and shift travel packed as one [2, C] tensor (DNNL_ARG_SCALE_SHIFT).
constexpr bool kPackedScaleShift = !kV3;

inline dnnl::normalization_flags bn_scale_shift_flags() {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
#else
  return dnnl::normalization_flags::use_scale_shift;
#endif
}

inline BnFwd::primitive_desc bn_forward(const engine& e, prop_kind pk, const md& src, float eps,
                                        dnnl::normalization_flags flags) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, pk, src, src, eps, flags};
#else
  return {BnFwd::desc(pk, src, eps, flags), e};
#endif
}

inline BnBwd::primitive_desc bn_backward(const engine& e, const md& diff, const md& src, float eps,
                                         dnnl::normalization_flags flags, const BnFwd::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, prop_kind::backward, diff, diff, src, eps, flags, hint};
#else
  return {BnBwd::desc(prop_kind::backward, diff, src, eps, flags), e, hint};
#endif
}

// Argument ids of the scale/shift tensors: (scale, shift) in 3.x; 2.x uses the packed
// DNNL_ARG_SCALE_SHIFT / DNNL_ARG_DIFF_SCALE_SHIFT only.
#if DNNL_VERSION_MAJOR >= 3
constexpr int kArgScale = DNNL_ARG_SCALE, kArgShift = DNNL_ARG_SHIFT;
constexpr int kArgDiffScale = DNNL_ARG_DIFF_SCALE, kArgDiffShift = DNNL_ARG_DIFF_SHIFT;
constexpr int kArgScaleShift = -1, kArgDiffScaleShift = -1;
#else
constexpr int kArgScale = -1, kArgShift = -1, kArgDiffScale = -1, kArgDiffShift = -1;
constexpr int kArgScaleShift = DNNL_ARG_SCALE_SHIFT, kArgDiffScaleShift = DNNL_ARG_DIFF_SCALE_SHIFT;
#endif

// ---- pooling ----
using PoolFwd = dnnl::pooling_forward;
using PoolBwd = dnnl::pooling_backward;

inline PoolFwd::primitive_desc pool_forward(const engine& e, prop_kind pk, algorithm a, const md& src, const md& dst,
                                            const Geometry& g) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, pk, a, src, dst, g.strides, g.kernel, g.dilation, g.pad_l, g.pad_r};
#else
  return {PoolFwd::desc(pk, a, src, dst, g.strides, g.kernel, g.pad_l, g.pad_r), e};
#endif
}

inline PoolBwd::primitive_desc pool_backward(const engine& e, algorithm a, const md& diff_src, const md& diff_dst,
                                             const Geometry& g, const PoolFwd::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, a, diff_src, diff_dst, g.strides, g.kernel, g.dilation, g.pad_l, g.pad_r, hint};
#else
  return {PoolBwd::desc(a, diff_src, diff_dst, g.strides, g.kernel, g.pad_l, g.pad_r), e, hint};
#endif
}

// ---- element-wise and LRN (same source and destination layout) ----
using EltFwd = dnnl::eltwise_forward;
using EltBwd = dnnl::eltwise_backward;

inline EltFwd::primitive_desc eltwise_forward(const engine& e, prop_kind pk, algorithm a, const md& data, float alpha,
                                              float beta) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, pk, a, data, data, alpha, beta};
#else
  return {EltFwd::desc(pk, a, data, alpha, beta), e};
#endif
}

inline EltBwd::primitive_desc eltwise_backward(const engine& e, algorithm a, const md& diff, const md& data,
                                               float alpha, float beta, const EltFwd::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, a, diff, diff, data, alpha, beta, hint};
#else
  return {EltBwd::desc(a, diff, data, alpha, beta), e, hint};
#endif
}

using LrnFwd = dnnl::lrn_forward;
using LrnBwd = dnnl::lrn_backward;

struct LrnParams {
  memory::dim size;
  float alpha, beta, k;
};

inline LrnFwd::primitive_desc lrn_forward(const engine& e, prop_kind pk, const md& data, const LrnParams& p) {
  const algorithm a = algorithm::lrn_across_channels;
#if DNNL_VERSION_MAJOR >= 3
  return {e, pk, a, data, data, p.size, p.alpha, p.beta, p.k};
#else
  return {LrnFwd::desc(pk, a, data, p.size, p.alpha, p.beta, p.k), e};
#endif
}

inline LrnBwd::primitive_desc lrn_backward(const engine& e, const md& diff, const md& data, const LrnParams& p,
                                           const LrnFwd::primitive_desc& hint) {
  const algorithm a = algorithm::lrn_across_channels;
#if DNNL_VERSION_MAJOR >= 3
  return {e, a, diff, diff, data, p.size, p.alpha, p.beta, p.k, hint};
#else
  return {LrnBwd::desc(a, data, diff, p.size, p.alpha, p.beta, p.k), e, hint};
#endif
}

// ---- concat (dst == nullptr: oneDNN picks the destination layout) ----
inline dnnl::concat::primitive_desc concat(const engine& e, const md* dst, int axis, const std::vector<md>& srcs) {
#if DNNL_VERSION_MAJOR >= 3
  if (dst) return {e, *dst, axis, srcs};
  return {e, axis, srcs};
#else
  if (dst) return {*dst, axis, srcs, e};
  return {axis, srcs, e};
#endif
}

// ---- dst = src0 + src1 (any data type and layout, the same for all three) ----
inline dnnl::binary::primitive_desc binary_add(const engine& e, const md& data) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, algorithm::binary_add, data, data, data};
#else
  return {dnnl::binary::desc(algorithm::binary_add, data, data, data), e};
#endif
}

// ---- the ISA oneDNN dispatches to (after ONEDNN_MAX_CPU_ISA) ----
// Whether it includes the AVX512-BF16 instructions (AMX ISAs include them as well).
inline bool effective_isa_has_bf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  return (isa & bf16) == bf16;
}

}  // namespace cohort::backend::dnnlc
