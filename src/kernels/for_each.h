// Element-wise work written once, run where a stream runs: kernels::for_each calls a
// COHORT_HD functor f(i, args...) for every i in [0, n), and kernels::reduce_into
// combines map(i) over [0, n). On the host they run on a libgomp team of the stream's
// threads (the OpenMP runtime oneDNN uses, so no second pool competes with its
// workers), serially below kSerialBelow elements; on CUDA they are one kernel launch
// of the same functor (src/kernels/cuda/launch.cuh); on the test device they run
// inline. No std::function and no allocation per call.
//
// In a CUDA build every (functor, argument types) that for_each or reduce_into is
// called with is instantiated in a .cu file of src/kernels/cuda/ (one per functor
// family); a missing one fails to link. Code that only ever runs on the host calls
// host_for_each and host_reduce_into, which need none.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/status.h"
#include "tensor/device.h"

extern "C" {
// libgomp, the OpenMP runtime oneDNN is built with (declared here so that cohort's
// own sources need no -fopenmp, which would pull in clang's libomp instead).
// GOMP_parallel is libgomp's entry for `#pragma omp parallel`.
void omp_set_num_threads(int);
int omp_get_max_threads(void);
int omp_get_thread_num(void);
int omp_get_num_threads(void);
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
}

// libgomp is not built with ThreadSanitizer, so TSan cannot see that a team's start
// orders the caller's writes before its members' reads, nor that the join orders theirs
// before the caller's: parallel_chunks tells it through the TSan runtime's annotations.
#if defined(__SANITIZE_THREAD__)
#  define COHORT_TSAN_OPENMP 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define COHORT_TSAN_OPENMP 1
#  endif
#endif
#ifdef COHORT_TSAN_OPENMP
extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}
#endif

namespace cohort::kernels {

// Below this many elements a host loop runs on the calling thread alone: waking a
// team costs more than it saves.
inline constexpr int64_t kSerialBelow = int64_t{1} << 14;
// The largest team a host reduction splits across (its partial sums live on the stack).
inline constexpr int kMaxReduceTeam = 64;

// fn(lo, hi) over [0, n) in chunks of whole cache lines (16 elements of 4 bytes), one
// per member of a libgomp team of `threads`; on the calling thread alone when threads
// <= 1 or n < kSerialBelow. fn must not throw.
template <typename Fn>
void parallel_chunks(int threads, int64_t n, const Fn& fn) {
  if (n <= 0) return;
  if (threads <= 1 || n < kSerialBelow) {
    fn(int64_t{0}, n);
    return;
  }
  struct Work {
    int64_t n;
    const Fn* fn;
  } work{n, &fn};
#ifdef COHORT_TSAN_OPENMP
  __tsan_release(&work);
#endif
  GOMP_parallel(
      [](void* p) {
#ifdef COHORT_TSAN_OPENMP
        __tsan_acquire(p);
#endif
        const Work& w = *static_cast<const Work*>(p);
        const int64_t parts = omp_get_num_threads(), i = omp_get_thread_num();
        const int64_t chunk = ((w.n + parts - 1) / parts + 15) / 16 * 16;
        const int64_t lo = i * chunk, hi = std::min(w.n, lo + chunk);
        if (lo < hi) (*w.fn)(lo, hi);
#ifdef COHORT_TSAN_OPENMP
        __tsan_release(p);
#endif
      },
      &work, static_cast<unsigned>(threads), 0);
#ifdef COHORT_TSAN_OPENMP
  __tsan_acquire(&work);
#endif
}

// One tensor's share of for_each_list: f(i, args...) for i in [0, n). The arguments
// are pointers (a CUDA launch carries them in its parameters).
template <typename F, typename... Args>
struct ForEachItem {
  static_assert(sizeof...(Args) > 0 && (std::is_pointer_v<Args> && ...), "list arguments are pointers");
  int64_t n;
  F f;
  std::tuple<Args...> args;
};

// One tensor's share of reduce_list_into: map(i) for i in [0, n).
template <typename Map>
struct ReduceItem {
  int64_t n;
  Map map;
};

// One tensor's share of reduce_each_into: map(i) for i in [0, n), combined into *out.
template <typename T, typename Map>
struct ReduceToItem {
  int64_t n;
  Map map;
  T* out;
};

namespace cuda {
// Defined in src/kernels/cuda/launch.cuh; each functor family instantiates what it
// uses in a .cu file of src/kernels/cuda/. Launch errors throw kCuda.
template <typename F, typename... Args>
void launch_for_each(void* stream, int64_t n, F f, Args... args);
template <typename T, typename Map, typename Combine>
void launch_reduce_into(void* stream, int64_t n, Map map, Combine combine, T* out);
template <typename F, typename... Args>
void launch_for_each_list(void* stream, std::span<const ForEachItem<F, Args...>> items);
template <typename T, typename Map, typename Combine>
void launch_reduce_each_into(void* stream, std::span<const ReduceToItem<T, Map>> items, Combine combine);
}  // namespace cuda

[[noreturn]] inline void no_cuda_kernels() {
  fail(Code::kUnsupported, "a CUDA stream reached an element-wise kernel, but this build of cohort has no CUDA");
}

// f(i, args...) for i in [0, n) on a host team of `threads`. Each member loops over a
// copy of f of its own: a store through an argument cannot change a local's members,
// so the compiler keeps them in registers, hoists the functor's branches out of the
// loop and vectorises it (through a reference to the caller's f, every store to a
// float array could be one to f's float members, which blocked all three: SGD's update
// ran at a third of a plain axpy).
template <typename F, typename... Args>
void host_for_each(int threads, int64_t n, const F& f, Args... args) {
  parallel_chunks(threads, n, [&](int64_t lo, int64_t hi) {
    const F local = f;
    for (int64_t i = lo; i < hi; ++i) local(i, args...);
  });
}

// f(i, args...) for i in [0, n), ordered on `stream`. f must not throw; on the host it
// may run on several threads at once (for different i).
template <typename F, typename... Args>
void for_each(const Stream& stream, int64_t n, const F& f, Args... args) {
  if (n <= 0) return;
  if (stream.device().kind == Device::Kind::kCuda) {
#if COHORT_HAVE_CUDA
    cuda::launch_for_each(stream.native(), n, f, args...);
    return;
#else
    no_cuda_kernels();
#endif
  }
  host_for_each(stream.threads(), n, f, args...);
}

// reduce_into (below) on a host team of `threads`; each member maps with a copy of
// map of its own, as host_for_each does.
template <typename T, typename Map, typename Combine>
void host_reduce_into(int threads, int64_t n, const Map& map, const Combine& combine, T* out) {
  if (n <= 0) return;
  const int team = std::min(threads, kMaxReduceTeam);
  if (team <= 1 || n < kSerialBelow) {
    const Map local = map;
    T acc = local(int64_t{0});
    for (int64_t i = 1; i < n; ++i) acc = combine(acc, local(i));
    *out = combine(*out, acc);
    return;
  }
  struct alignas(64) Slot {
    T value;
    bool used;
  };
  Slot slots[kMaxReduceTeam];
  for (Slot& s : slots) s.used = false;
  parallel_chunks(team, n, [&](int64_t lo, int64_t hi) {
    const Map local = map;
    T acc = local(lo);
    for (int64_t i = lo + 1; i < hi; ++i) acc = combine(acc, local(i));
    Slot& s = slots[omp_get_thread_num()];
    s.value = acc;
    s.used = true;
  });
  T acc = *out;
  for (const Slot& s : slots)
    if (s.used) acc = combine(acc, s.value);
  *out = acc;
}

// *out = combine(*out, combine(map(0), map(1), ..., map(n - 1))), ordered on `stream`;
// `out` lives on the stream's device and holds the identity (or an earlier result) of
// `combine`, which must be associative and commutative. map(i) may write element i of
// its own buffers (a scaling pass that also checks its results). T is 4 or 8 bytes
// (the CUDA kernel combines into *out with atomicCAS, or atomicAdd for a sum, kSum, of
// u32, f32 or f64 values).
// On the host the order of the combination is fixed for a given thread count.
template <typename T, typename Map, typename Combine>
void reduce_into(const Stream& stream, int64_t n, const Map& map, const Combine& combine, T* out) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "reduce_into combines 4- or 8-byte values");
  if (n <= 0) return;
  if (stream.device().kind == Device::Kind::kCuda) {
#if COHORT_HAVE_CUDA
    cuda::launch_reduce_into<T>(stream.native(), n, map, combine, out);
    return;
#else
    no_cuda_kernels();
#endif
  }
  host_reduce_into(stream.threads(), n, map, combine, out);
}

// for_each over a list of tensors (an optimizer's parameters, say), ordered on `stream`
// as the calls one per item would be. On CUDA a few launches serve the whole list, each
// carrying dozens of items in its parameters, where one launch per tensor costs a few
// microseconds of the host and of the GPU for each of a network's hundreds of small
// tensors; on the host the items run one after the other.
template <typename F, typename... Args>
void for_each_list(const Stream& stream, const std::vector<ForEachItem<F, Args...>>& items) {
  if (items.empty()) return;
  if (stream.device().kind == Device::Kind::kCuda) {
#if COHORT_HAVE_CUDA
    cuda::launch_for_each_list(stream.native(), std::span<const ForEachItem<F, Args...>>(items));
    return;
#else
    no_cuda_kernels();
#endif
  }
  for (const ForEachItem<F, Args...>& item : items)
    std::apply([&](Args... a) { host_for_each(stream.threads(), item.n, item.f, a...); }, item.args);
}

// reduce_into for each item of a list into the item's own *out (the same rules), in a
// few launches: per-tensor sums (the LARS norms) that the host reads back at once.
template <typename T, typename Map, typename Combine>
void reduce_each_into(const Stream& stream, const std::vector<ReduceToItem<T, Map>>& items, const Combine& combine) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "reduce_each_into combines 4- or 8-byte values");
  if (items.empty()) return;
  if (stream.device().kind == Device::Kind::kCuda) {
#if COHORT_HAVE_CUDA
    cuda::launch_reduce_each_into<T>(stream.native(), std::span<const ReduceToItem<T, Map>>(items), combine);
    return;
#else
    no_cuda_kernels();
#endif
  }
  for (const ReduceToItem<T, Map>& item : items)
    host_reduce_into(stream.threads(), item.n, item.map, combine, item.out);
}

// reduce_into over a list of tensors into one *out (the same rules), in a few launches:
// reduce_each_into with every item's output `out`.
template <typename T, typename Map, typename Combine>
void reduce_list_into(const Stream& stream, const std::vector<ReduceItem<Map>>& items, const Combine& combine, T* out) {
  std::vector<ReduceToItem<T, Map>> to;
  to.reserve(items.size());
  for (const ReduceItem<Map>& item : items) to.push_back({item.n, item.map, out});
  reduce_each_into(stream, to, combine);
}

}  // namespace cohort::kernels
