// Host memory copies for the collectives' large buffers. glibc 2.36 copies large blocks
// with `rep movsb`, which on AMD Zen runs ~20x slower (2 GB/s instead of 40-50 in
// cache) when the destination lies a few bytes past the source modulo 64: whether a
// reduction hit that case depended on where malloc had put the caller's buffer. Plain
// vector loads and stores have no such cliff.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>

#if defined(__SSE2__)
#  include <emmintrin.h>
#endif

namespace cohort {
namespace copy_detail {

// Copies the 64-byte blocks of [i, n) from s to d, each as four 16-byte loads and four
// stores (non-temporal ones with kStream), and returns where the blocks end.
template <bool kStream>
inline size_t copy_blocks(unsigned char* d, const unsigned char* s, size_t i, size_t n) {
#if defined(__SSE2__)
  for (; i + 64 <= n; i += 64) {
    __m128i v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16 * k));
    for (int k = 0; k < 4; ++k) {
      auto* to = reinterpret_cast<__m128i*>(d + i + 16 * k);
      if constexpr (kStream)
        _mm_stream_si128(to, v[k]);
      else
        _mm_storeu_si128(to, v[k]);
    }
  }
#endif
  return i;
}

}  // namespace copy_detail

// memcpy(dst, src, n) for buffers that do not overlap.
inline void copy_bytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const size_t i = copy_detail::copy_blocks<false>(d, s, 0, n);
  if (i < n) std::memcpy(d + i, s + i, n - i);  // the tail (or everything without SSE2)
}

// copy_bytes for a destination that nobody reads soon, larger than the caches: a plain
// store first reads the line it writes (a third of the memory traffic of a copy), a
// non-temporal store writes the whole line to memory without reading it. The stores are
// weakly ordered: stream_fence() before another thread may read dst.
inline void stream_bytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  // Plain stores up to dst's next line, then whole lines (16-byte aligned stores).
  const size_t head = std::min(n, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  copy_bytes(d, s, head);
  const size_t i = copy_detail::copy_blocks<true>(d, s, head, n);
  copy_bytes(d + i, s + i, n - i);
}

// Orders the stream_bytes stores before this thread's later stores.
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace cohort
