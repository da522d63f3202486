#include "backend/cpu/max_pool.h"

#include <algorithm>
#include <type_traits>

#include "backend/cpu/cpu_features.h"

#if defined(__x86_64__)
#  include <immintrin.h>
#endif

namespace cohort::backend::cpu {

PoolLayout nchw_layout(int64_t, int64_t c, int64_t h, int64_t w) { return {1, c * h * w, h * w, w, 1}; }
PoolLayout nhwc_layout(int64_t, int64_t c, int64_t h, int64_t w) { return {c, h * w * c, 0, w * c, c}; }
PoolLayout blocked_layout(int64_t, int64_t c, int64_t h, int64_t w, int64_t block) {
  const int64_t blocks = (c + block - 1) / block;
  return {block, blocks * h * w * block, h * w * block, w * block, block};
}

int64_t max_pool_planes(const MaxPoolGeometry& g, const PoolLayout& x) { return g.n * ((g.c + x.block - 1) / x.block); }
int64_t max_pool_arg_size(const MaxPoolGeometry& g, const PoolLayout& x) {
  return max_pool_planes(g, x) * g.oh * g.ow * x.block;
}

namespace {

#if defined(__x86_64__)
#  if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), which its
// -Wmaybe-uninitialized reports as a use of an uninitialised value.
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#  endif
#  define COHORT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// 16 channels as f32 in one register, from and to f32 or bf16 (uint16_t bits; stored
// rounded to nearest even, as kernels/half.h's float_to_bf16: the maxima, each one of
// the inputs, exactly).
COHORT_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
COHORT_AVX512 inline __m512 load16(const uint16_t* p) {
  const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
COHORT_AVX512 inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
COHORT_AVX512 inline void store16(uint16_t* p, __m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}

// 16 channels of a gradient whose channels lie `step` elements apart (1: contiguous, in
// a block of 16 or NHWC; else NCHW, of which only the first `valid` exist).
struct Group {
  int64_t step;
  int valid;
};

template <typename S>
COHORT_AVX512 inline __m512 load_group(const S* p, const Group& g) {
  if (g.step == 1) return load16(p);
  alignas(64) S v[16] = {};
  for (int j = 0; j < g.valid; ++j) v[j] = p[j * g.step];
  return load16(v);
}

// The windows covering input pixels in turn: [first, end) covers index i (a row or a
// column) after advance(i), for i = 0, 1, 2, ... (windows of size k, stride s,
// padding p; o of them). Without a division: a pass calls it for every pixel.
struct Covering {
  int64_t first = 0, end = 0;
  void advance(int64_t i, int k, int s, int p, int64_t o) {
    while (first < o && first * s - p + k <= i) ++first;
    while (end < o && end * s - p <= i) ++end;
  }
};

// One plane of a pass: the input's pixels of image n and channels [c, c + kb), and
// where the same channels of the output (or its gradient) and of the taps lie.
template <typename S>
struct Plane {
  int64_t c, kb;
  const S* x;              // forward: the input's pixel (0, 0)
  S* dx;                   // backward: the input gradient's pixel (0, 0)
  const uint8_t* taps;     // backward: the plane's taps, [oh][ow][kb]
  int64_t y0;              // the output's channel c at pixel (0, 0)
  int64_t row, col, step;  // the output's strides: rows, columns, channels
  // Output (oy, ox)'s channels [c + c0, c + c0 + 16) in y or dy, and how they lie.
  int64_t at(int64_t oy, int64_t ox, int64_t c0) const { return y0 + oy * row + ox * col + c0 * step; }
  Group group(int64_t c0, int64_t channels) const {
    return {step, static_cast<int>(std::min<int64_t>(16, channels - c - c0))};
  }
};

// The maximum and its tap of 16 channels of output (oy, ox). KH, KW > 0: a window of
// that size wholly inside the input, whose loops the compiler unrolls; 0: any window,
// clipped to the input. relu: no tap (255) where the maximum is not positive.
template <int KH, int KW, typename S>
COHORT_AVX512 inline void window_max(const MaxPoolGeometry& g, const PoolLayout& xl, int64_t oy, int64_t ox, const S* x,
                                     S* y, uint8_t* arg, bool relu) {
  const int64_t top = oy * g.sh - g.ph, left = ox * g.sw - g.pw;
  int64_t h0 = top, h1 = top + KH, w0 = left, w1 = left + KW;
  if (KH == 0) {
    h0 = std::max<int64_t>(top, 0);
    h1 = std::min<int64_t>(top + g.kh, g.ih);
    w0 = std::max<int64_t>(left, 0);
    w1 = std::min<int64_t>(left + g.kw, g.iw);
  }
  const int kw = KW > 0 ? KW : g.kw;
  __m512 acc = _mm512_set1_ps(-3.402823466e38f);
  __m128i tap = _mm_set1_epi8(static_cast<char>((h0 - top) * kw + (w0 - left)));
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) {
      const __m512 v = load16(x + h * xl.row + w * xl.col);
      const __mmask16 more = _mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ);
      acc = _mm512_mask_mov_ps(acc, more, v);
      tap = _mm_mask_mov_epi8(tap, more, _mm_set1_epi8(static_cast<char>((h - top) * kw + (w - left))));
    }
  store16(y, acc);
  if (relu) tap = _mm_mask_mov_epi8(_mm_set1_epi8(-1), _mm512_cmp_ps_mask(acc, _mm512_setzero_ps(), _CMP_GT_OQ), tap);
  if (arg) _mm_storeu_si128(reinterpret_cast<__m128i*>(arg), tap);
}

// Whether output (oy, ox)'s window lies wholly inside the input.
inline bool inside(const MaxPoolGeometry& g, int64_t oy, int64_t ox) {
  const int64_t top = oy * g.sh - g.ph, left = ox * g.sw - g.pw;
  return top >= 0 && left >= 0 && top + g.kh <= g.ih && left + g.kw <= g.iw;
}

// Output pixels of a row that an NCHW output (or gradient) passes through a buffer in,
// 16 channels each: then each channel's run is written (or read) contiguously.
constexpr int64_t kRun = 64;

template <int KH, int KW, typename S>
COHORT_AVX512 void plane_max(const MaxPoolGeometry& g, const PoolLayout& xl, const Plane<S>& pl, S* y, uint8_t* taps,
                             bool relu) {
  alignas(64) S run[kRun * 16];
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t c0 = 0; c0 < pl.kb; c0 += 16)
      for (int64_t ox0 = 0; ox0 < g.ow; ox0 += kRun) {
        const int64_t n = std::min(kRun, g.ow - ox0);
        for (int64_t ox = ox0; ox < ox0 + n; ++ox) {
          uint8_t* a = taps ? taps + (oy * g.ow + ox) * pl.kb + c0 : nullptr;
          S* yv = pl.step == 1 ? y + pl.at(oy, ox, c0) : run + (ox - ox0) * 16;
          if ((KH > 0) && inside(g, oy, ox))
            window_max<KH, KW>(g, xl, oy, ox, pl.x + c0, yv, a, relu);
          else
            window_max<0, 0>(g, xl, oy, ox, pl.x + c0, yv, a, relu);
        }
        if (pl.step == 1) continue;
        const Group yg = pl.group(c0, g.c);
        for (int j = 0; j < yg.valid; ++j) {
          S* to = y + pl.at(oy, ox0, c0) + j * pl.step;
          for (int64_t i = 0; i < n; ++i) to[i * pl.col] = run[i * 16 + j];
        }
      }
}

// Backward of windows that tile the input (stride = size, no padding, none past its
// edge): each input pixel in at most one window, whose gradient goes to its recorded
// tap and zeros to the rest; the rows and columns past the last window get zeros.
template <typename S>
COHORT_AVX512 void plane_tiles_backward(const MaxPoolGeometry& g, const PoolLayout& xl, const Plane<S>& pl,
                                        const S* dy) {
  const __m512 zero = _mm512_setzero_ps();
  alignas(64) S run[kRun * 16];
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t c0 = 0; c0 < pl.kb; c0 += 16)
      for (int64_t ox0 = 0; ox0 < g.ow; ox0 += kRun) {
        const int64_t n = std::min(kRun, g.ow - ox0);
        if (pl.step != 1) {  // the run of dy, 16 channels a pixel, zeros past the last channel
          const Group dg = pl.group(c0, g.c);
          std::fill(run, run + n * 16, S{0});
          for (int j = 0; j < dg.valid; ++j) {
            const S* from = dy + pl.at(oy, ox0, c0) + j * pl.step;
            for (int64_t i = 0; i < n; ++i) run[i * 16 + j] = from[i * pl.col];
          }
        }
        for (int64_t ox = ox0; ox < ox0 + n; ++ox) {
          const __m512 d = load16(pl.step == 1 ? dy + pl.at(oy, ox, c0) : run + (ox - ox0) * 16);
          const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pl.taps + (oy * g.ow + ox) * pl.kb + c0));
          for (int r = 0; r < g.kh; ++r)
            for (int q = 0; q < g.kw; ++q) {
              const __mmask16 mine = _mm_cmpeq_epi8_mask(a, _mm_set1_epi8(static_cast<char>(r * g.kw + q)));
              store16(pl.dx + (oy * g.kh + r) * xl.row + (ox * g.kw + q) * xl.col + c0, _mm512_maskz_mov_ps(mine, d));
            }
        }
      }
  for (int64_t iy = 0; iy < g.ih; ++iy)
    for (int64_t ix = 0; ix < g.iw; ++ix)
      if (iy >= g.oh * g.kh || ix >= g.ow * g.kw)
        for (int64_t c0 = 0; c0 < pl.kb; c0 += 16) store16(pl.dx + iy * xl.row + ix * xl.col + c0, zero);
}

// Backward of overlapping windows in f32: the plane's gradient zeroed, then each
// window's added at its recorded tap (the pixels a window covers are a few rows, in
// the cache); the sums in another order than gradient_sum's, exact at one term each.
COHORT_AVX512 inline void plane_scatter_backward(const MaxPoolGeometry& g, const PoolLayout& xl, const Plane<float>& pl,
                                                 const float* dy) {
  for (int64_t iy = 0; iy < g.ih; ++iy)
    for (int64_t ix = 0; ix < g.iw; ++ix)
      for (int64_t c0 = 0; c0 < pl.kb; c0 += 16)
        _mm512_storeu_ps(pl.dx + iy * xl.row + ix * xl.col + c0, _mm512_setzero_ps());
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    const int64_t top = oy * g.sh - g.ph, h0 = std::max<int64_t>(top, 0), h1 = std::min<int64_t>(top + g.kh, g.ih);
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t left = ox * g.sw - g.pw, w0 = std::max<int64_t>(left, 0);
      const int64_t w1 = std::min<int64_t>(left + g.kw, g.iw);
      for (int64_t c0 = 0; c0 < pl.kb; c0 += 16) {
        const __m512 d = load_group(dy + pl.at(oy, ox, c0), pl.group(c0, g.c));
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pl.taps + (oy * g.ow + ox) * pl.kb + c0));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) {
            const int t = static_cast<int>((h - top) * g.kw + (w - left));
            const __mmask16 mine = _mm_cmpeq_epi8_mask(a, _mm_set1_epi8(static_cast<char>(t)));
            float* at = pl.dx + h * xl.row + w * xl.col + c0;
            _mm512_storeu_ps(at, _mm512_mask_add_ps(_mm512_loadu_ps(at), mine, _mm512_loadu_ps(at), d));
          }
      }
    }
  }
}

// What the windows covering input pixel (iy, ix) send 16 of its channels [c0, c0 + 16).
template <typename S>
COHORT_AVX512 inline void gradient_sum(const MaxPoolGeometry& g, const PoolLayout& xl, const Plane<S>& pl, const S* dy,
                                       int64_t iy, int64_t ix, const Covering& rows, const Covering& cols, int64_t c0) {
  const Group dg = pl.group(c0, g.c);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t oy = rows.first; oy < rows.end; ++oy)
    for (int64_t ox = cols.first; ox < cols.end; ++ox) {
      const int t = static_cast<int>((iy - (oy * g.sh - g.ph)) * g.kw + (ix - (ox * g.sw - g.pw)));
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pl.taps + (oy * g.ow + ox) * pl.kb + c0));
      const __mmask16 mine = _mm_cmpeq_epi8_mask(a, _mm_set1_epi8(static_cast<char>(t)));
      sum = _mm512_mask_add_ps(sum, mine, sum, load_group(dy + pl.at(oy, ox, c0), dg));
    }
  store16(pl.dx + iy * xl.row + ix * xl.col + c0, sum);
}

template <typename S>
Plane<S> plane_of(const MaxPoolGeometry& g, const PoolLayout& xl, const PoolLayout& yl, int64_t p, const S* x, S* dx,
                  const uint8_t* arg) {
  const int64_t kb = xl.block, blocks = (g.c + kb - 1) / kb, n = p / blocks, c = p % blocks * kb;
  const int64_t base = n * xl.image + c / kb * xl.chunk;
  // y's layout is x's (its channels [c, c + kb) contiguous at each pixel) or NCHW
  return {c,
          kb,
          x ? x + base : nullptr,
          dx ? dx + base : nullptr,
          arg ? arg + p * g.oh * g.ow * kb : nullptr,
          yl.at(n, c, 0, 0),
          yl.row,
          yl.col,
          yl.block == 1 ? yl.chunk : 1};
}

template <typename S>
COHORT_AVX512 void forward_planes(const MaxPoolGeometry& g, const S* x, const PoolLayout& xl, S* y,
                                  const PoolLayout& yl, uint8_t* arg, bool relu, int64_t lo, int64_t hi) {
  for (int64_t p = lo; p < hi; ++p) {
    const Plane<S> pl = plane_of<S>(g, xl, yl, p, x, nullptr, nullptr);
    uint8_t* taps = arg ? arg + p * g.oh * g.ow * xl.block : nullptr;
    if (g.kh == 2 && g.kw == 2)
      plane_max<2, 2>(g, xl, pl, y, taps, relu);
    else if (g.kh == 3 && g.kw == 3)
      plane_max<3, 3>(g, xl, pl, y, taps, relu);
    else
      plane_max<0, 0>(g, xl, pl, y, taps, relu);
  }
}

template <typename S>
COHORT_AVX512 void backward_planes(const MaxPoolGeometry& g, const S* dy, const PoolLayout& yl, const uint8_t* arg,
                                   S* dx, const PoolLayout& xl, int64_t lo, int64_t hi) {
  const bool tiles =
      g.sh == g.kh && g.sw == g.kw && g.ph == 0 && g.pw == 0 && g.oh * g.kh <= g.ih && g.ow * g.kw <= g.iw;
  for (int64_t p = lo; p < hi; ++p) {
    const Plane<S> pl = plane_of<S>(g, xl, yl, p, nullptr, dx, arg);
    if (tiles) {
      plane_tiles_backward(g, xl, pl, dy);
      continue;
    }
    if constexpr (std::is_same_v<S, float>) {  // bf16 sums each pixel's terms in f32 below
      plane_scatter_backward(g, xl, pl, dy);
      continue;
    }
    Covering rows;
    for (int64_t iy = 0; iy < g.ih; ++iy) {
      rows.advance(iy, g.kh, g.sh, g.ph, g.oh);
      Covering cols;
      for (int64_t ix = 0; ix < g.iw; ++ix) {
        cols.advance(ix, g.kw, g.sw, g.pw, g.ow);
        for (int64_t c0 = 0; c0 < pl.kb; c0 += 16) gradient_sum(g, xl, pl, dy, iy, ix, rows, cols, c0);
      }
    }
  }
}
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#  endif
#endif

}  // namespace

bool max_pool_supported(const MaxPoolGeometry& g, const PoolLayout& x) {
#if defined(__x86_64__)
  return cpu_has_avx512() && x.block % 16 == 0 && g.kh > 0 && g.kw > 0 && g.kh * g.kw <= 255;
#else
  (void)g;
  (void)x;
  return false;
#endif
}

void max_pool_forward(const MaxPoolGeometry& g, bool bf16, const void* x, const PoolLayout& xl, void* y,
                      const PoolLayout& yl, uint8_t* arg, bool relu, int64_t lo, int64_t hi) {
#if defined(__x86_64__)
  if (bf16)
    forward_planes(g, static_cast<const uint16_t*>(x), xl, static_cast<uint16_t*>(y), yl, arg, relu, lo, hi);
  else
    forward_planes(g, static_cast<const float*>(x), xl, static_cast<float*>(y), yl, arg, relu, lo, hi);
#else
  (void)g, (void)bf16, (void)x, (void)xl, (void)y, (void)yl, (void)arg, (void)relu, (void)lo, (void)hi;
#endif
}

void max_pool_backward(const MaxPoolGeometry& g, bool bf16, const void* dy, const PoolLayout& yl, const uint8_t* arg,
                       void* dx, const PoolLayout& xl, int64_t lo, int64_t hi) {
#if defined(__x86_64__)
  if (bf16)
    backward_planes(g, static_cast<const uint16_t*>(dy), yl, arg, static_cast<uint16_t*>(dx), xl, lo, hi);
  else
    backward_planes(g, static_cast<const float*>(dy), yl, arg, static_cast<float*>(dx), xl, lo, hi);
#else
  (void)g, (void)bf16, (void)dy, (void)yl, (void)arg, (void)dx, (void)xl, (void)lo, (void)hi;
#endif
}

}  // namespace cohort::backend::cpu
