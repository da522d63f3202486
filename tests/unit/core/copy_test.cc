// The collectives' copies (core/copy.h): copy_bytes and stream_bytes move exactly the
// bytes asked for at every alignment of source and destination, and nothing around them.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/copy.h"

namespace cohort {
namespace {

template <typename Copy>
void check_every_alignment(Copy copy, const char* name) {
  constexpr size_t kGuard = 64;
  // Below one line, around one and two lines, and large enough for the vector loop.
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{63}, size_t{64}, size_t{65}, size_t{127}, size_t{128},
                   size_t{129}, size_t{1000}, size_t{4096 + 17}}) {
    for (size_t dst_off = 0; dst_off < 64; dst_off += 7) {
      for (size_t src_off : {size_t{0}, size_t{3}, size_t{32}}) {
        alignas(64) static unsigned char src[2 * kGuard + 8192], dst[2 * kGuard + 8192];
        for (size_t i = 0; i < sizeof src; ++i) {
          src[i] = static_cast<unsigned char>(i * 131 + 7);
          dst[i] = 0xEE;
        }
        copy(dst + kGuard + dst_off, src + kGuard + src_off, n);
        stream_fence();
        size_t wrong = 0;
        for (size_t i = 0; i < sizeof dst; ++i) {
          const bool inside = i >= kGuard + dst_off && i < kGuard + dst_off + n;
          const unsigned char want = inside ? src[i - dst_off + src_off] : 0xEE;
          if (dst[i] != want && wrong++ < 3)
            ADD_FAILURE() << name << ": " << n << " bytes, destination offset " << dst_off << ", source offset "
                          << src_off << ": byte " << i << " is " << int{dst[i]} << ", expected " << int{want}
                          << (inside ? "" : " (outside the copy)");
        }
      }
    }
  }
}

TEST(Copy, CopyBytesMovesExactlyTheRangeAtEveryAlignment) {
  check_every_alignment([](void* d, const void* s, size_t n) { copy_bytes(d, s, n); }, "copy_bytes");
}

TEST(Copy, StreamBytesMovesExactlyTheRangeAtEveryAlignment) {
  check_every_alignment([](void* d, const void* s, size_t n) { stream_bytes(d, s, n); }, "stream_bytes");
}

}  // namespace
}  // namespace cohort
