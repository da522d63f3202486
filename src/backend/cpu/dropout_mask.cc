#include "backend/cpu/dropout_mask.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_features.h"
#include "kernels/dropout.h"
#include "kernels/half.h"

#if defined(__x86_64__)
#  include <immintrin.h>
#endif

namespace cohort::backend {
namespace {

// Dropped when the 24-bit draw w >> 8 is below p·2^24: uniform01(w) < p exactly.
uint32_t drop_threshold(float p) { return static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 16777216.0)); }

void mask_scalar(uint8_t* keep, int64_t n, uint64_t offset, uint64_t stream, uint64_t seed, uint32_t threshold) {
  for (int64_t i = 0; i < n;) {
    const uint64_t e = offset + static_cast<uint64_t>(i);
    const kernels::Philox4 r = kernels::philox4x32(e >> 2, stream, seed);
    for (uint64_t j = e & 3; j < 4 && i < n; ++j, ++i) keep[i] = (r.v[j] >> 8) >= threshold;
  }
}

#if defined(__x86_64__)
#  if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), which its
// -Wmaybe-uninitialized reports as a use of an uninitialised value.
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#  endif
// 64 elements (16 counters) per iteration; `first` is the first counter, whose low
// word must not wrap within the 16.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void mask_avx512(uint8_t* keep, int64_t blocks, uint64_t first,
                                                                      uint64_t stream, uint64_t seed,
                                                                      uint32_t threshold) {
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i t = _mm512_set1_epi32(static_cast<int>(threshold));
  const __mmask16 odd = 0xAAAA;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint64_t base = first + static_cast<uint64_t>(b) * 16;
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base))), lane);
    __m512i c1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base >> 32)));
    __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
    __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream >> 32)));
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const __m512i e0 = _mm512_mul_epu32(c0, m0), o0 = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
      const __m512i e1 = _mm512_mul_epu32(c2, m1), o1 = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1);
      const __m512i lo0 = _mm512_mask_blend_epi32(odd, e0, _mm512_slli_epi64(o0, 32));
      const __m512i hi0 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(e0, 32), o0);
      const __m512i lo1 = _mm512_mask_blend_epi32(odd, e1, _mm512_slli_epi64(o1, 32));
      const __m512i hi1 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(e1, 32), o1);
      c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
      c1 = lo1;
      c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // Word j of counter l decides element 4l + j: interleave the four keep vectors.
    const __m128i one = _mm_set1_epi8(1);
    const __m128i w0 = _mm_maskz_mov_epi8(_mm512_cmpge_epu32_mask(_mm512_srli_epi32(c0, 8), t), one);
    const __m128i w1 = _mm_maskz_mov_epi8(_mm512_cmpge_epu32_mask(_mm512_srli_epi32(c1, 8), t), one);
    const __m128i w2 = _mm_maskz_mov_epi8(_mm512_cmpge_epu32_mask(_mm512_srli_epi32(c2, 8), t), one);
    const __m128i w3 = _mm_maskz_mov_epi8(_mm512_cmpge_epu32_mask(_mm512_srli_epi32(c3, 8), t), one);
    const __m128i a_lo = _mm_unpacklo_epi8(w0, w1), a_hi = _mm_unpackhi_epi8(w0, w1);
    const __m128i b_lo = _mm_unpacklo_epi8(w2, w3), b_hi = _mm_unpackhi_epi8(w2, w3);
    __m128i* out = reinterpret_cast<__m128i*>(keep + b * 64);
    _mm_storeu_si128(out + 0, _mm_unpacklo_epi16(a_lo, b_lo));
    _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(a_lo, b_lo));
    _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(a_hi, b_hi));
    _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(a_hi, b_hi));
  }
}

#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#  endif
#endif

}  // namespace

void dropout_mask(uint8_t* keep, int64_t n, uint64_t offset, uint64_t stream, uint64_t seed, float p) {
  const uint32_t threshold = drop_threshold(p);
#if defined(__x86_64__)
  if (cpu::cpu_has_avx512()) {
    // Scalar up to a counter boundary whose low word does not wrap within 16 counters,
    // then whole blocks of 64 elements.
    int64_t head = static_cast<int64_t>((64 - offset % 64) % 64);
    if (head > n) head = n;
    mask_scalar(keep, head, offset, stream, seed, threshold);
    int64_t i = head;
    while (n - i >= 64) {
      const uint64_t first = (offset + static_cast<uint64_t>(i)) >> 2;
      // blocks until the low word of the counter would wrap (at most every 2^32 counters)
      const uint64_t room = (0x100000000ull - (first & 0xffffffffull)) / 16;
      const int64_t blocks = std::min<int64_t>((n - i) / 64, static_cast<int64_t>(room));
      if (blocks == 0) break;
      mask_avx512(keep + i, blocks, first, stream, seed, threshold);
      i += blocks * 64;
    }
    mask_scalar(keep + i, n - i, offset + static_cast<uint64_t>(i), stream, seed, threshold);
    return;
  }
#endif
  mask_scalar(keep, n, offset, stream, seed, threshold);
}

namespace {

// The loops, written once and compiled twice: for the build's baseline ISA and (with
// runtime dispatch) for AVX-512, where they vectorise 16 wide.
template <typename S, typename Load, typename Store>
inline __attribute__((always_inline)) void apply_loop(const S* x, S* y, const uint8_t* keep, int64_t n, float scale,
                                                      Load load, Store store) {
  for (int64_t i = 0; i < n; ++i) y[i] = keep[i] ? store(load(x[i]) * scale) : S{0};
}

inline float f32_load(float v) { return v; }
inline float f32_store(float v) { return v; }
// bf16 rounding as kernels/half.h's float_to_bf16, in a form that vectorises.
inline float bf16_load(uint16_t v) { return kernels::bf16_to_float(v); }
inline uint16_t bf16_store(float f) {
  const uint32_t x = kernels::float_bits(f);
  const uint32_t nan = (x >> 16) | 0x40u;
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl"))) void apply_avx512(const float* x, float* y, const uint8_t* keep,
                                                                       int64_t n, float scale) {
  apply_loop(x, y, keep, n, scale, f32_load, f32_store);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) void apply_avx512(const uint16_t* x, uint16_t* y,
                                                                       const uint8_t* keep, int64_t n, float scale) {
  apply_loop(x, y, keep, n, scale, bf16_load, bf16_store);
}
#endif

}  // namespace

void dropout_apply_mask(const float* x, float* y, const uint8_t* keep, int64_t n, float scale) {
#if defined(__x86_64__)
  if (cpu::cpu_has_avx512()) return apply_avx512(x, y, keep, n, scale);
#endif
  apply_loop(x, y, keep, n, scale, f32_load, f32_store);
}

void dropout_apply_mask(const uint16_t* x, uint16_t* y, const uint8_t* keep, int64_t n, float scale) {
#if defined(__x86_64__)
  if (cpu::cpu_has_avx512()) return apply_avx512(x, y, keep, n, scale);
#endif
  apply_loop(x, y, keep, n, scale, bf16_load, bf16_store);
}

}  // namespace cohort::backend
