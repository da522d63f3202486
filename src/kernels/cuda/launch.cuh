// The CUDA side of kernels::for_each and kernels::reduce_into (kernels/for_each.h):
// grid-stride kernels over the same COHORT_HD functors the host loops call. Included
// only by the .cu files of this folder, which instantiate the functor families they
// serve; a call with a combination nobody instantiated fails to link.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/status.h"
#include "kernels/for_each.h"
#include "kernels/list_launch.h"

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

// Whether the block's result joins *out through the hardware's atomic add: a sum
// (Combine::kSum) of a type atomicAdd takes. A compare-and-swap loop on one address
// retries under contention, which a reduction's many blocks would meet.
template <typename T, typename Combine>
constexpr bool kAtomicSum = requires {
  requires Combine::kSum;
}
&&(std::is_same_v<T, unsigned int> || std::is_same_v<T, float> || std::is_same_v<T, double>);

// Combines each thread's `acc` (where `have`) across the block, then the block's result
// into *out. Every thread of the block calls it.
template <typename T, typename Combine>
__device__ void block_combine_into(T acc, bool have, Combine combine, T* out) {
  __shared__ T partial[kBlock];
  // No identity element is known, so each slot says whether it holds a value.
  __shared__ bool has[kBlock];
  partial[threadIdx.x] = acc;
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
  if (threadIdx.x != 0 || !has[0]) return;
  if constexpr (kAtomicSum<T, Combine>) {
    if (partial[0] != T{}) atomicAdd(out, partial[0]);  // adding zero changes nothing
  } else {
    atomic_combine(out, partial[0], combine);
  }
}

template <typename T, typename Map, typename Combine>
__global__ void reduce_kernel(int64_t n, Map map, Combine combine, T* out) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool have = i < n;
  T acc{};
  if (have) {
    acc = map(i);
    for (i += stride; i < n; i += stride) acc = combine(acc, map(i));
  }
  block_combine_into(acc, have, combine, out);
}

template <typename T, typename Map, typename Combine>
void launch_reduce_into(void* stream, int64_t n, Map map, Combine combine, T* out) {
  reduce_kernel<T><<<blocks_for(n), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(n, map, combine, out);
  check_launch("a reduction kernel");
}

// Lists (kernels/list_launch.h says how they split): a launch's items and their first
// blocks travel in its parameters, read in place (__grid_constant__: a block indexes
// them at run time, which would otherwise copy the ~4 KB into each thread's memory).
template <int kItems, typename Payload>
struct ListLaunch {
  int count;
  unsigned first_block[kItems + 1];
  Payload item[kItems];
};

template <typename F, typename... Args>
struct ForEachPayload {
  int64_t n;
  F f;
  void* p[sizeof...(Args)];
};

template <typename F, typename... Args, size_t... I>
__device__ void call_item(const ForEachPayload<F, Args...>& it, int64_t i, std::index_sequence<I...>) {
  it.f(i, static_cast<Args>(it.p[I])...);
}

template <int kItems, typename F, typename... Args>
__global__ void for_each_list_kernel(__grid_constant__ const ListLaunch<kItems, ForEachPayload<F, Args...>> l) {
  const ListShare s = list_share(l.first_block, l.count, blockIdx.x, blockDim.x, threadIdx.x);
  const ForEachPayload<F, Args...>& it = l.item[s.item];
  for (int64_t i = s.first; i < it.n; i += s.stride) call_item(it, i, std::index_sequence_for<Args...>{});
}

// Each item combines into its own output (a block serves one item).
template <int kItems, typename T, typename Map, typename Combine>
__global__ void reduce_list_kernel(__grid_constant__ const ListLaunch<kItems, ReduceToItem<T, Map>> l,
                                   Combine combine) {
  const ListShare s = list_share(l.first_block, l.count, blockIdx.x, blockDim.x, threadIdx.x);
  const ReduceToItem<T, Map>& it = l.item[s.item];
  const bool have = s.first < it.n;
  T acc{};
  if (have) {
    acc = it.map(s.first);
    for (int64_t i = s.first + s.stride; i < it.n; i += s.stride) acc = combine(acc, it.map(i));
  }
  block_combine_into(acc, have, combine, it.out);
}

// Runs launch(l) for each launch of plan_list_launches over `items`; payload(item)
// makes an item's parameters.
template <int kItems, typename Payload, typename Item, typename Make, typename Launch>
void in_launches(std::span<const Item> items, Make payload, Launch launch) {
  static_assert(kItems >= 8, "a list item's functor is too large for a launch's parameters");
  static_assert(sizeof(ListLaunch<kItems, Payload>) <= kListParamBytes);
  std::vector<int64_t> n;
  n.reserve(items.size());
  for (const Item& item : items) n.push_back(item.n);
  ListLaunch<kItems, Payload> l{};  // unused slots travel as zeros
  for (const ListLaunchPlan& plan : plan_list_launches(n, kItems, kBlock)) {
    l.count = static_cast<int>(plan.items.size());
    for (size_t k = 0; k < plan.items.size(); ++k) l.item[k] = payload(items[plan.items[k]]);
    std::copy(plan.first_block.begin(), plan.first_block.end(), l.first_block);
    launch(l, plan.first_block.back());
  }
}

template <typename F, typename... Args>
void launch_for_each_list(void* stream, std::span<const ForEachItem<F, Args...>> items) {
  using Payload = ForEachPayload<F, Args...>;
  constexpr int kItems = list_capacity(sizeof(Payload));
  in_launches<kItems, Payload>(
      items,
      [](const ForEachItem<F, Args...>& item) {
        Payload p;
        p.n = item.n;
        p.f = item.f;
        std::apply(
            [&](Args... a) {
              int k = 0;
              ((p.p[k++] = const_cast<void*>(static_cast<const void*>(a))), ...);
            },
            item.args);
        return p;
      },
      [&](const ListLaunch<kItems, Payload>& l, unsigned blocks) {
        for_each_list_kernel<kItems, F, Args...><<<blocks, kBlock, 0, static_cast<cudaStream_t>(stream)>>>(l);
        check_launch("an element-wise kernel over a list of tensors");
      });
}

template <typename T, typename Map, typename Combine>
void launch_reduce_each_into(void* stream, std::span<const ReduceToItem<T, Map>> items, Combine combine) {
  using Payload = ReduceToItem<T, Map>;
  constexpr int kItems = list_capacity(sizeof(Payload));
  in_launches<kItems, Payload>(
      items, [](const Payload& item) { return item; },
      [&](const ListLaunch<kItems, Payload>& l, unsigned blocks) {
        reduce_list_kernel<kItems, T, Map, Combine>
            <<<blocks, kBlock, 0, static_cast<cudaStream_t>(stream)>>>(l, combine);
        check_launch("a reduction kernel over a list of tensors");
      });
}

}  // namespace cohort::kernels::cuda
