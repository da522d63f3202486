// The CUDA side of kernels::for_each and kernels::reduce_into (kernels/for_each.h):
// grid-stride kernels over the same COHORT_HD functors the host loops call. Included
// only by the .cu files of this folder, which instantiate the functor families they
// serve; a call with a combination nobody instantiated fails to link.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/status.h"
#include "kernels/for_each.h"

namespace cohort::kernels::cuda {

inline constexpr int kBlock = 256;
// Enough blocks to fill any current GPU several times over; the grid-stride loop
// covers the rest.
inline constexpr int64_t kMaxBlocks = 8192;

inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kBlock - 1) / kBlock, kMaxBlocks));
}

inline void check_launch(const char* what) {
  cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) fail(Code::kCuda, "launching ", what, " failed: ", cudaGetErrorString(rc));
}

template <typename F, typename... Args>
__global__ void for_each_kernel(int64_t n, F f, Args... args) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i, args...);
}

template <typename F, typename... Args>
void launch_for_each(void* stream, int64_t n, F f, Args... args) {
  for_each_kernel<<<blocks_for(n), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(n, f, args...);
  check_launch("an element-wise kernel");
}

// Combines `value` into *out with a compare-and-swap loop on its bits.
template <typename T, typename Combine>
__device__ void atomic_combine(T* out, T value, Combine combine) {
  using Bits = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
  Bits* addr = reinterpret_cast<Bits*>(out);
  Bits old = *addr, assumed;
  do {
    assumed = old;
    T current;
    memcpy(&current, &assumed, sizeof(T));
    const T next = combine(current, value);
    Bits next_bits;
    memcpy(&next_bits, &next, sizeof(T));
    old = atomicCAS(addr, assumed, next_bits);
  } while (old != assumed);
}

template <typename T, typename Map, typename Combine>
__global__ void reduce_kernel(int64_t n, Map map, Combine combine, T* out) {
  __shared__ T partial[kBlock];
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  bool have = i < n;
  T acc{};
  if (have) {
    acc = map(i);
    for (i += stride; i < n; i += stride) acc = combine(acc, map(i));
  }
  // No identity element is known, so each slot says whether it holds a value.
  partial[threadIdx.x] = acc;
  __shared__ bool has[kBlock];
  has[threadIdx.x] = have;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s /= 2) {
    if (threadIdx.x < s && has[threadIdx.x + s]) {
      partial[threadIdx.x] =
          has[threadIdx.x] ? combine(partial[threadIdx.x], partial[threadIdx.x + s]) : partial[threadIdx.x + s];
      has[threadIdx.x] = true;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0 && has[0]) atomic_combine(out, partial[0], combine);
}

template <typename T, typename Map, typename Combine>
void launch_reduce_into(void* stream, int64_t n, Map map, Combine combine, T* out) {
  reduce_kernel<T><<<blocks_for(n), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(n, map, combine, out);
  check_launch("a reduction kernel");
}

}  // namespace cohort::kernels::cuda
