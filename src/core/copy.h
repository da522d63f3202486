// Host memory copies for the collectives' large buffers. glibc 2.36 copies large blocks
// with `rep movsb`, which on AMD Zen runs ~20x slower (2 GB/s instead of 40-50 in
// cache) when the destination lies a few bytes past the source modulo 64: whether a
// reduction hit that case depended on where malloc had put the caller's buffer. Plain
// vector loads and stores have no such cliff.
#pragma once

#include <cstddef>
#include <cstring>

#if defined(__SSE2__)
#  include <emmintrin.h>
#endif

namespace cohort {

// memcpy(dst, src, n) for buffers that do not overlap.
inline void copy_bytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
#endif
  if (i < n) std::memcpy(d + i, s + i, n - i);  // the tail (or everything without SSE2)
}

}  // namespace cohort
