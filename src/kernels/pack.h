// kVec neighbouring values read or written as one 16-byte access (8 f16 or bf16 values,
// 4 f32), so that an element-wise pass over 2-byte values keeps memory busy: the packed
// forms of the batch-norm and pooling functors, which take the channels of an NHWC
// value kVec at a time.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "kernels/hd.h"

namespace cohort::kernels {

template <typename S, int kVec>
struct alignas(sizeof(S) * kVec < 16 ? sizeof(S) * kVec : 16) Pack {
  S v[kVec];
};

template <typename S, int kVec>
COHORT_HD Pack<S, kVec> load_pack(const S* p) {
  return *reinterpret_cast<const Pack<S, kVec>*>(p);
}

template <typename S, int kVec>
COHORT_HD void store_pack(S* p, const Pack<S, kVec>& v) {
  *reinterpret_cast<Pack<S, kVec>*>(p) = v;
}

// How many values of storage type S a packed pass takes at once.
template <typename S>
inline constexpr int kPack = static_cast<int>(16 / sizeof(S));

// Whether a packed pass can serve `channels` channels and these buffers: whole packs
// per row, every pointer (null ones aside) aligned to 16 bytes.
template <typename S>
bool packs_fit(int64_t channels, std::initializer_list<const void*> pointers) {
  if (channels % kPack<S> != 0) return false;
  for (const void* p : pointers)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace cohort::kernels
