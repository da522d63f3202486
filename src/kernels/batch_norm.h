// Batch norm of values whose channels are innermost (NHWC images), written once for host
// and device: the CUDA backend's batch norm for NHWC values outside cuDNN's fused f16
// form, where cuDNN's own batch norm runs 50–100 times slower than memory allows. Rows
// are the N·H·W positions and C the channels: element i is channel i % C of row i / C.
//
//   training forward   channel_sums(BnStats)      -> BnForwardFinalize per channel -> BnAffine
//   inference forward                                BnInferenceFinalize            -> BnAffine
//   backward           channel_sums(BnGradStats)  -> BnBackwardFinalize per channel -> BnBackwardData
//
// bn_forward_statistics and bn_backward_statistics run a pass's sums and its finalize as
// one launch on a GPU: the sums kernel's last block to finish finalizes every channel.
//
// The sums' maps and the element-wise passes have packed forms (BnStatsPacked,
// BnGradStatsPacked with channel_sums_packed; BnAffinePacked, BnBackwardDataPacked) that
// take 16 bytes of a row at once where the channels and the buffers allow (packs_fit),
// with the same arithmetic per value.
//
// In training the relu after the batch norm, or the add and the relu of a residual
// block's end (relu(bn(x) + z)), can fold into it: BnAffine adds z and applies the relu,
// and the backward pass masks dy by the relu's output y (the relu's gradient, as
// kernels::act_backward computes it), uses that for the batch norm and writes it as z's.
//
// The sums run in f32 within a thread over at most kBnRowsPerThread rows and in f64
// across threads; the forward ones are shifted by the channel's value in row 0, so that
// the variance E[(x − k)²] − E[x − k]² does not cancel when the mean is far from zero.
// The running statistics follow `momentum` with the unbiased variance (cuDNN's and the
// CPU backend's convention); the saved statistics are the mean and 1 / sqrt(var + eps).
// Values are stored as S and computed in f32 through a codec C (kernels/reduce.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/for_each.h"
#include "kernels/hd.h"
#include "kernels/layer_ops.h"
#include "kernels/pack.h"

namespace cohort::kernels {

// The most rows one thread adds up in f32 before its sum joins the f64 total.
inline constexpr int64_t kBnRowsPerThread = 64;

// Element i's channel, i % channels, in 32 bits where i fits: a GPU divides int64 in a
// long instruction sequence, which an element-wise pass over f16 values would wait on.
COHORT_HD int64_t channel_of(int64_t i, int64_t channels) {
  if (i < (int64_t{1} << 32)) return static_cast<int64_t>(static_cast<uint32_t>(i) % static_cast<uint32_t>(channels));
  return i % channels;
}

// A channel total that other blocks of the running kernel added (atomically) on a GPU:
// read from L2, past this multiprocessor's L1.
COHORT_HD double load_total(const double* p) {
#ifdef __CUDA_ARCH__
  return __ldcg(p);
#else
  return *p;
#endif
}

// What element (row, c) adds to its channel's two sums: x − x[row 0], and its square.
template <typename S = float, typename C = F32>
struct BnStats {
  const S* x;
  int64_t channels;
  COHORT_HD void operator()(int64_t row, int64_t c, float& a, float& b) const {
    const float v = C::load(x[row * channels + c]) - C::load(x[c]);
    a = v;
    b = v * v;
  }
};

// The gradient reaching the batch norm at element i: dy, or with a folded relu of output
// y, the relu's gradient.
COHORT_HD float bn_grad(float dy, bool relu, float out) {
  return relu ? act_backward(Act::kRelu, 0.f, out, out, dy) : dy;
}
template <typename S, typename C>
COHORT_HD float bn_grad_in(const S* dy, const S* y, int64_t i) {
  return bn_grad(C::load(dy[i]), y != nullptr, y ? C::load(y[i]) : 0.f);
}

// ... in the backward pass: g = bn_grad_in, and g·(x − mean).
template <typename S = float, typename C = F32>
struct BnGradStats {
  const S* x;
  const S* dy;
  const float* mean;
  int64_t channels;
  const S* y = nullptr;  // the folded relu's output, or none
  COHORT_HD void operator()(int64_t row, int64_t c, float& a, float& b) const {
    const int64_t i = row * channels + c;
    const float g = bn_grad_in<S, C>(dy, y, i);
    a = g;
    b = g * (C::load(x[i]) - mean[c]);
  }
};

// Per channel c, from the sums: the batch's mean and 1 / sqrt(var + eps) (saved for the
// backward pass), the running statistics, and coef = {γ·inv_std, mean, β} for BnAffine.
// It leaves the channel's sums at zero, ready for the next pass's (no clearing pass).
template <typename S = float, typename C = F32>
struct BnForwardFinalize {
  double* sums;  // [2C]: Σ(x − k), Σ(x − k)²; zero on return
  const S* x;    // row 0 holds the shift k
  const float *gamma, *beta;
  float *running_mean, *running_var, *saved_mean, *saved_inv_std;
  float* coef;  // [3C]
  int64_t rows, channels;
  float eps, momentum;
  COHORT_HD void operator()(int64_t c) const {
    const double n = static_cast<double>(rows);
    const double shifted = load_total(sums + c) / n;
    const double d = load_total(sums + channels + c) / n - shifted * shifted;
    sums[c] = sums[channels + c] = 0.0;
    const double var = d < 0 ? 0.0 : d;  // rounding can make it slightly negative; NaN stays NaN
    const double mean = static_cast<double>(C::load(x[c])) + shifted;
    const float inv = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    saved_mean[c] = static_cast<float>(mean);
    saved_inv_std[c] = inv;
    const double unbiased = rows > 1 ? var * n / (n - 1) : var;
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    coef[c] = gamma[c] * inv;
    coef[channels + c] = static_cast<float>(mean);
    coef[2 * channels + c] = beta[c];
  }
};

// Per channel c, in inference: coef = {γ / sqrt(running_var + eps), running_mean, β}.
struct BnInferenceFinalize {
  const float *gamma, *beta, *running_mean, *running_var;
  float* coef;  // [3C]
  int64_t channels;
  float eps;
  COHORT_HD void operator()(int64_t c) const {
    coef[c] = static_cast<float>(gamma[c] / std::sqrt(static_cast<double>(running_var[c]) + eps));
    coef[channels + c] = running_mean[c];
    coef[2 * channels + c] = beta[c];
  }
};

// y = (x − mean)·scale + β with coef = {scale, mean, β} per channel; with z, + z; with
// relu, the relu of that.
template <typename S = float, typename C = F32>
struct BnAffine {
  int64_t channels;
  bool relu = false;
  COHORT_HD void operator()(int64_t i, S* y, const S* x, const float* coef, const S* z) const {
    const int64_t c = channel_of(i, channels);
    float v = (C::load(x[i]) - coef[channels + c]) * coef[c] + coef[2 * channels + c];
    if (z) v += C::load(z[i]);
    y[i] = C::store(relu ? act_forward(Act::kRelu, 0.f, v) : v);
  }
};

// Per channel c, from the backward sums: the parameters' gradients (written, not added:
// dγ = Σ dy·x̂, dβ = Σ dy) and coef = {k1, k2, k3, mean} for BnBackwardData, where
// dx = γ·inv·(dy − Σdy / n − x̂·Σ(dy·x̂) / n) = k1·dy + k2·(x − mean) + k3. It leaves
// the channel's sums at zero, as BnForwardFinalize does.
struct BnBackwardFinalize {
  double* sums;  // [2C]: Σ dy, Σ dy·(x − mean); zero on return
  const float *gamma, *mean, *inv_std;
  float *grad_gamma, *grad_beta;
  float* coef;  // [4C]
  int64_t rows, channels;
  COHORT_HD void operator()(int64_t c) const {
    const double n = static_cast<double>(rows), inv = inv_std[c], sdy = load_total(sums + c),
                 sdxm = load_total(sums + channels + c);
    sums[c] = sums[channels + c] = 0.0;
    grad_gamma[c] = static_cast<float>(sdxm * inv);
    grad_beta[c] = static_cast<float>(sdy);
    const double k1 = gamma[c] * inv;
    coef[c] = static_cast<float>(k1);
    coef[channels + c] = static_cast<float>(-k1 * inv * inv * sdxm / n);
    coef[2 * channels + c] = static_cast<float>(-k1 * sdy / n);
    coef[3 * channels + c] = mean[c];
  }
};

// With g = bn_grad_in (dy, or the folded relu's gradient from its output y): dx (=, or
// += with accumulate) k1·g + k2·(x − mean) + k3 with coef = {k1, k2, k3, mean}, where dx
// is wanted; and z's gradient dz (=, or += with z_accumulate) g, where a folded add's z
// wants one.
template <typename S = float, typename C = F32>
struct BnBackwardData {
  int64_t channels;
  bool accumulate;
  bool z_accumulate = false;
  COHORT_HD void operator()(int64_t i, S* dx, const S* dy, const S* x, const float* coef, const S* y, S* dz) const {
    const float g = bn_grad_in<S, C>(dy, y, i);
    if (dx) {
      const int64_t c = channel_of(i, channels);
      store<S, C>(dx + i,
                  coef[c] * g + coef[channels + c] * (C::load(x[i]) - coef[3 * channels + c]) + coef[2 * channels + c],
                  accumulate);
    }
    if (dz) store<S, C>(dz + i, g, z_accumulate);
  }
};

// BnAffine over pack p (values p·kVec ... p·kVec + kVec − 1, all of one row, since the
// channels are a multiple of kVec), with the same arithmetic per value.
template <typename S = float, typename C = F32, int kVec = kPack<S>>
struct BnAffinePacked {
  int64_t channels;
  bool relu = false;
  COHORT_HD void operator()(int64_t p, S* y, const S* x, const float* coef, const S* z) const {
    const int64_t i = p * kVec, c = channel_of(i, channels);
    const Pack<S, kVec> xv = load_pack<S, kVec>(x + i);
    Pack<S, kVec> zv{};
    if (z) zv = load_pack<S, kVec>(z + i);
    const Pack<float, kVec> scale = load_pack<float, kVec>(coef + c),
                            mean = load_pack<float, kVec>(coef + channels + c),
                            beta = load_pack<float, kVec>(coef + 2 * channels + c);
    Pack<S, kVec> out;
    for (int k = 0; k < kVec; ++k) {
      float v = (C::load(xv.v[k]) - mean.v[k]) * scale.v[k] + beta.v[k];
      if (z) v += C::load(zv.v[k]);
      out.v[k] = C::store(relu ? act_forward(Act::kRelu, 0.f, v) : v);
    }
    store_pack<S, kVec>(y + i, out);
  }
};

// BnBackwardData over pack p, with the same arithmetic per value.
template <typename S = float, typename C = F32, int kVec = kPack<S>>
struct BnBackwardDataPacked {
  int64_t channels;
  bool accumulate;
  bool z_accumulate = false;
  COHORT_HD void operator()(int64_t p, S* dx, const S* dy, const S* x, const float* coef, const S* y, S* dz) const {
    const int64_t i = p * kVec;
    const Pack<S, kVec> dyv = load_pack<S, kVec>(dy + i);
    Pack<S, kVec> yv{};
    if (y) yv = load_pack<S, kVec>(y + i);
    float g[kVec];
    for (int k = 0; k < kVec; ++k) g[k] = bn_grad(C::load(dyv.v[k]), y != nullptr, C::load(yv.v[k]));
    if (dx) {
      const int64_t c = channel_of(i, channels);
      const Pack<S, kVec> xv = load_pack<S, kVec>(x + i);
      const Pack<float, kVec> k1 = load_pack<float, kVec>(coef + c), k2 = load_pack<float, kVec>(coef + channels + c),
                              k3 = load_pack<float, kVec>(coef + 2 * channels + c),
                              mean = load_pack<float, kVec>(coef + 3 * channels + c);
      Pack<S, kVec> out{};
      if (accumulate) out = load_pack<S, kVec>(dx + i);
      for (int k = 0; k < kVec; ++k)
        store<S, C>(&out.v[k], k1.v[k] * g[k] + k2.v[k] * (C::load(xv.v[k]) - mean.v[k]) + k3.v[k], accumulate);
      store_pack<S, kVec>(dx + i, out);
    }
    if (dz) {
      Pack<S, kVec> out{};
      if (z_accumulate) out = load_pack<S, kVec>(dz + i);
      for (int k = 0; k < kVec; ++k) store<S, C>(&out.v[k], g[k], z_accumulate);
      store_pack<S, kVec>(dz + i, out);
    }
  }
};

// BnStats over the kVec channels c0 ... c0 + kVec − 1 of a row, with the same arithmetic
// per value (the packed channel sums' map).
template <typename S = float, typename C = F32, int kVec = kPack<S>>
struct BnStatsPacked {
  const S* x;
  int64_t channels;
  COHORT_HD void operator()(int64_t row, int64_t c0, float* a, float* b) const {
    const Pack<S, kVec> v = load_pack<S, kVec>(x + row * channels + c0), k = load_pack<S, kVec>(x + c0);
    for (int j = 0; j < kVec; ++j) {
      a[j] = C::load(v.v[j]) - C::load(k.v[j]);
      b[j] = a[j] * a[j];
    }
  }
};

// BnGradStats over kVec channels of a row, with the same arithmetic per value.
template <typename S = float, typename C = F32, int kVec = kPack<S>>
struct BnGradStatsPacked {
  const S* x;
  const S* dy;
  const float* mean;
  int64_t channels;
  const S* y = nullptr;
  COHORT_HD void operator()(int64_t row, int64_t c0, float* a, float* b) const {
    const int64_t i = row * channels + c0;
    const Pack<S, kVec> dyv = load_pack<S, kVec>(dy + i), xv = load_pack<S, kVec>(x + i);
    Pack<S, kVec> yv{};
    if (y) yv = load_pack<S, kVec>(y + i);
    const Pack<float, kVec> m = load_pack<float, kVec>(mean + c0);
    for (int j = 0; j < kVec; ++j) {
      const float g = bn_grad(C::load(dyv.v[j]), y != nullptr, C::load(yv.v[j]));
      a[j] = g;
      b[j] = g * (C::load(xv.v[j]) - m.v[j]);
    }
  }
};

// How the packed channel sums spread over a GPU: blocks of 32 × 8 threads; in a block's
// warp, lanes cover q neighbouring packs of a row (16 bytes each; q = 32, or the largest
// power of two up to the packs per row) and 32 / q rows, so that a warp reads 512 bytes
// at a time even where a row has few channels; a block covers q packs and
// rows_per_block rows, each thread at most kBnRowsPerThread of them (more only where the
// grid would exceed 65535 rows of blocks).
struct BnSumsLayout {
  int64_t packs = 0;  // per row
  int q = 0;          // packs a block covers: a power of two up to 32
  int row_lanes = 0;  // threads of a block on one pack: 8 · 32 / q
  int64_t rows_per_block = 0;
  unsigned grid_x = 0, grid_y = 0;
};

// The layout for rows × channels values of vec-value packs, or none (false) where the
// channels are not whole packs.
inline bool bn_sums_layout(int64_t rows, int64_t channels, int vec, BnSumsLayout& l) {
  if (rows <= 0 || channels <= 0 || channels % vec != 0) return false;
  l.packs = channels / vec;
  l.q = 32;
  while (l.q > l.packs) l.q /= 2;
  l.row_lanes = 8 * (32 / l.q);
  constexpr int64_t kMaxGridY = 65535;
  l.rows_per_block = l.row_lanes * kBnRowsPerThread;
  if ((rows + l.rows_per_block - 1) / l.rows_per_block > kMaxGridY)
    l.rows_per_block = ((rows + kMaxGridY - 1) / kMaxGridY + l.row_lanes - 1) / l.row_lanes * l.row_lanes;
  l.grid_x = static_cast<unsigned>((l.packs + l.q - 1) / l.q);
  l.grid_y = static_cast<unsigned>((rows + l.rows_per_block - 1) / l.rows_per_block);
  return true;
}

// Thread (tx, ty) of block (bx, by): its pack (−1: none), and its rows first, first +
// stride, ... below end.
struct BnSumsShare {
  int64_t pack, first, end, stride;
};
COHORT_HD BnSumsShare bn_sums_share(const BnSumsLayout& l, int64_t rows, unsigned bx, unsigned by, unsigned tx,
                                    unsigned ty) {
  const int64_t p = static_cast<int64_t>(bx) * l.q + tx % static_cast<unsigned>(l.q);
  const int64_t lane = static_cast<int64_t>(ty) * (32 / l.q) + tx / static_cast<unsigned>(l.q);
  const int64_t r0 = static_cast<int64_t>(by) * l.rows_per_block;
  const int64_t r1 = r0 + l.rows_per_block < rows ? r0 + l.rows_per_block : rows;
  return {p < l.packs ? p : -1, r0 + lane, r1, l.row_lanes};
}

namespace cuda {
// Defined in src/kernels/cuda/batch_norm_kernels.cu for the maps above.
template <typename Map>
void launch_channel_sums(void* stream, int64_t rows, int64_t channels, Map map, double* sums);
template <int kVec, typename Map>
void launch_channel_sums_packed(void* stream, int64_t rows, int64_t channels, const BnSumsLayout& l, Map map,
                                double* sums);
// The same, then then(c) for every channel by the last block to finish (*tickets: zero
// before, zero after).
template <typename Map, typename Then>
void launch_channel_sums_then(void* stream, int64_t rows, int64_t channels, Map map, double* sums, Then then,
                              uint32_t* tickets);
template <int kVec, typename Map, typename Then>
void launch_channel_sums_packed_then(void* stream, int64_t rows, int64_t channels, const BnSumsLayout& l, Map map,
                                     double* sums, Then then, uint32_t* tickets);
}  // namespace cuda

// The host's channel sums over kVec-channel packs: map(row, c0, a, b) fills a[kVec] and
// b[kVec] for channels c0 ... c0 + kVec − 1; sums[c] += Σ_rows a and sums[C + c] += Σ_rows b,
// on a team of `threads` (packs split across it; rows summed as the device does: f32
// over kBnRowsPerThread rows, f64 across).
template <int kVec, typename Map>
void host_pack_sums(int threads, int64_t rows, int64_t channels, const Map& map, double* sums) {
  const int64_t packs = channels / kVec;
  parallel_chunks(threads, packs * kBnRowsPerThread, [&](int64_t lo, int64_t hi) {
    // [lo, hi) counts kBnRowsPerThread units per pack: pack p is this chunk's if its first
    // unit p·kBnRowsPerThread is
    for (int64_t p = (lo + kBnRowsPerThread - 1) / kBnRowsPerThread; p < (hi + kBnRowsPerThread - 1) / kBnRowsPerThread;
         ++p) {
      double ta[kVec] = {}, tb[kVec] = {};
      for (int64_t r0 = 0; r0 < rows; r0 += kBnRowsPerThread) {
        float pa[kVec] = {}, pb[kVec] = {};
        for (int64_t r = r0; r < std::min(rows, r0 + kBnRowsPerThread); ++r) {
          float a[kVec], b[kVec];
          map(r, p * kVec, a, b);
          for (int j = 0; j < kVec; ++j) {
            pa[j] += a[j];
            pb[j] += b[j];
          }
        }
        for (int j = 0; j < kVec; ++j) {
          ta[j] += pa[j];
          tb[j] += pb[j];
        }
      }
      for (int j = 0; j < kVec; ++j) {
        sums[p * kVec + j] += ta[j];
        sums[channels + p * kVec + j] += tb[j];
      }
    }
  });
}

// sums[c] += Σ_rows a and sums[C + c] += Σ_rows b of map(row, c, a, b), for every channel
// c, on a host team of `threads` (host_pack_sums with packs of one channel).
template <typename Map>
void host_channel_sums(int threads, int64_t rows, int64_t channels, const Map& map, double* sums) {
  host_pack_sums<1>(
      threads, rows, channels, [&](int64_t r, int64_t c, float* a, float* b) { map(r, c, a[0], b[0]); }, sums);
}

// host_channel_sums' work, ordered on `stream`; `sums` lives on the stream's device.
template <typename Map>
void channel_sums(const Stream& stream, int64_t rows, int64_t channels, const Map& map, double* sums) {
  if (rows <= 0 || channels <= 0) return;
  if (stream.device().kind == Device::Kind::kCuda) {
#if COHORT_HAVE_CUDA
    cuda::launch_channel_sums(stream.native(), rows, channels, map, sums);
    return;
#else
    no_cuda_kernels();
#endif
  }
  host_channel_sums(stream.threads(), rows, channels, map, sums);
}

// channel_sums with a packed map (BnStatsPacked, BnGradStatsPacked) laid out by `l`
// (bn_sums_layout with the map's kVec); on the host, pack by pack in host_channel_sums'
// order.
template <int kVec, typename Map>
void channel_sums_packed(const Stream& stream, int64_t rows, int64_t channels, const BnSumsLayout& l, const Map& map,
                         double* sums) {
  if (rows <= 0 || channels <= 0) return;
  if (stream.device().kind == Device::Kind::kCuda) {
#if COHORT_HAVE_CUDA
    cuda::launch_channel_sums_packed<kVec>(stream.native(), rows, channels, l, map, sums);
    return;
#else
    no_cuda_kernels();
#endif
  }
  host_pack_sums<kVec>(stream.threads(), rows, channels, map, sums);
}

// The steps of kernels/batch_norm.h for a stream, each in its packed form where the
// channels and the buffers allow (packs_fit), value by value otherwise.

// channel_sums (channel_sums_packed with a map of kVec > 1 channels, laid out by `l`),
// then then(c) for every channel c: on a GPU in the same launch, by its last block
// (tickets: one u32 on the device, zero before the call and after it), on the host once
// the sums are made. rows > 0: a batch norm's N·H·W (the graph refuses empty batches);
// without rows nothing runs.
template <int kVec, typename Map, typename Then>
void channel_sums_then(const Stream& stream, int64_t rows, int64_t channels, const BnSumsLayout& l, const Map& map,
                       double* sums, const Then& then, uint32_t* tickets) {
  if (rows <= 0 || channels <= 0) return;
  if (stream.device().kind == Device::Kind::kCuda) {
#if COHORT_HAVE_CUDA
    if constexpr (kVec > 1)
      cuda::launch_channel_sums_packed_then<kVec>(stream.native(), rows, channels, l, map, sums, then, tickets);
    else
      cuda::launch_channel_sums_then(stream.native(), rows, channels, map, sums, then, tickets);
    return;
#else
    (void)tickets;
    no_cuda_kernels();
#endif
  }
  if constexpr (kVec > 1)
    host_pack_sums<kVec>(stream.threads(), rows, channels, map, sums);
  else
    host_channel_sums(stream.threads(), rows, channels, map, sums);
  host_for_each(stream.threads(), channels, then);
}

// The forward channel sums of x (BnStats).
template <typename S, typename C>
void bn_stats_sums(const Stream& stream, int64_t rows, int64_t channels, const S* x, double* sums) {
  BnSumsLayout l;
  if (packs_fit<S>(channels, {x}) && bn_sums_layout(rows, channels, kPack<S>, l))
    channel_sums_packed<kPack<S>>(stream, rows, channels, l, BnStatsPacked<S, C>{x, channels}, sums);
  else
    channel_sums(stream, rows, channels, BnStats<S, C>{x, channels}, sums);
}

// The backward channel sums (BnGradStats).
template <typename S, typename C>
void bn_grad_sums(const Stream& stream, int64_t rows, int64_t channels, const S* x, const S* dy, const float* mean,
                  const S* y, double* sums) {
  BnSumsLayout l;
  if (packs_fit<S>(channels, {x, dy, mean, y}) && bn_sums_layout(rows, channels, kPack<S>, l))
    channel_sums_packed<kPack<S>>(stream, rows, channels, l, BnGradStatsPacked<S, C>{x, dy, mean, channels, y}, sums);
  else
    channel_sums(stream, rows, channels, BnGradStats<S, C>{x, dy, mean, channels, y}, sums);
}

// A training forward's statistics: the channel sums of f.x into f.sums, then f for
// every channel (one launch on a GPU; channel_sums_then).
template <typename S, typename C>
void bn_forward_statistics(const Stream& stream, const BnForwardFinalize<S, C>& f, uint32_t* tickets) {
  BnSumsLayout l;
  if (packs_fit<S>(f.channels, {f.x}) && bn_sums_layout(f.rows, f.channels, kPack<S>, l))
    channel_sums_then<kPack<S>>(stream, f.rows, f.channels, l, BnStatsPacked<S, C>{f.x, f.channels}, f.sums, f,
                                tickets);
  else
    channel_sums_then<1>(stream, f.rows, f.channels, l, BnStats<S, C>{f.x, f.channels}, f.sums, f, tickets);
}

// A backward pass's statistics: the channel sums of x, dy (masked by the folded relu's
// output y where set) and the saved mean into f.sums, then f for every channel.
template <typename S, typename C>
void bn_backward_statistics(const Stream& stream, const S* x, const S* dy, const S* y, const BnBackwardFinalize& f,
                            uint32_t* tickets) {
  BnSumsLayout l;
  if (packs_fit<S>(f.channels, {x, dy, f.mean, y}) && bn_sums_layout(f.rows, f.channels, kPack<S>, l))
    channel_sums_then<kPack<S>>(stream, f.rows, f.channels, l, BnGradStatsPacked<S, C>{x, dy, f.mean, f.channels, y},
                                f.sums, f, tickets);
  else
    channel_sums_then<1>(stream, f.rows, f.channels, l, BnGradStats<S, C>{x, dy, f.mean, f.channels, y}, f.sums, f,
                         tickets);
}

// BnAffine over n values.
template <typename S, typename C>
void bn_affine(const Stream& stream, int64_t n, int64_t channels, bool relu, S* y, const S* x, const float* coef,
               const S* z) {
  if (packs_fit<S>(channels, {y, x, coef, z}))
    for_each(stream, n / kPack<S>, BnAffinePacked<S, C>{channels, relu}, y, x, coef, z);
  else
    for_each(stream, n, BnAffine<S, C>{channels, relu}, y, x, coef, z);
}

// BnBackwardData over n values.
template <typename S, typename C>
void bn_backward_data(const Stream& stream, int64_t n, const BnBackwardData<S, C>& f, S* dx, const S* dy, const S* x,
                      const float* coef, const S* y, S* dz) {
  if (packs_fit<S>(f.channels, {dx, dy, x, coef, y, dz}))
    for_each(stream, n / kPack<S>, BnBackwardDataPacked<S, C>{f.channels, f.accumulate, f.z_accumulate}, dx, dy, x,
             coef, y, dz);
  else
    for_each(stream, n, f, dx, dy, x, coef, y, dz);
}

}  // namespace cohort::kernels
