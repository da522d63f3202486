// The CUDA backend's own element-wise and data-movement kernels: the kernels/ functors
// of layer_ops.h and pool.h, instantiated for each storage type a value can have (f32,
// f16, bf16) with the argument types the backend passes.
#include "kernels/cuda/launch.cuh"
#include "kernels/layer_ops.h"
#include "kernels/optim_update.h"
#include "kernels/pool.h"

namespace cohort::kernels::cuda {

// F<S, C> over (Args...).
#define COHORT_TYPED(F, S, C, ...) \
  template void launch_for_each<F<S, C>, __VA_ARGS__>(void*, int64_t, F<S, C>, __VA_ARGS__);

// F<S, C, kPack<S>> (the packed form) over (Args...).
#define COHORT_PACKED(F, S, C, ...) \
  template void launch_for_each<F<S, C, kPack<S>>, __VA_ARGS__>(void*, int64_t, F<S, C, kPack<S>>, __VA_ARGS__);

#define COHORT_LAYER_KERNELS(S, C)                                  \
  COHORT_TYPED(Fill, S, C, S*)                                      \
  COHORT_TYPED(DropoutForward, S, C, S*, const S*)                  \
  COHORT_TYPED(DropoutBackward, S, C, S*, const S*)                 \
  COHORT_TYPED(ActForward, S, C, S*, const S*)                      \
  COHORT_TYPED(ActBackward, S, C, S*, const S*, const S*, const S*) \
  COHORT_TYPED(Sum2, S, C, S*, const S*, const S*)                  \
  COHORT_TYPED(CopyTo, S, C, S*, const S*)                          \
  COHORT_TYPED(CopyRows, S, C, S*, const S*)                        \
  COHORT_TYPED(ShortcutAForward, S, C, S*, const S*)                \
  COHORT_TYPED(ShortcutABackward, S, C, S*, const S*)               \
  COHORT_TYPED(AddBias, S, C, S*, const float*)                     \
  COHORT_TYPED(WeightsFromOihw, S, C, S*, const float*)             \
  COHORT_TYPED(GradToOihw, S, C, float*, const S*)                  \
  COHORT_TYPED(PoolForward, S, C, S*, const S*, int32_t*)           \
  COHORT_TYPED(PoolBackward, S, C, S*, const S*, const int32_t*)    \
  COHORT_PACKED(PoolForward, S, C, S*, const S*, int32_t*)          \
  COHORT_PACKED(PoolBackward, S, C, S*, const S*, const int32_t*)

COHORT_LAYER_KERNELS(float, F32)
COHORT_LAYER_KERNELS(uint16_t, F16Codec)
COHORT_LAYER_KERNELS(uint16_t, BF16Codec)

// Every layer's weight copy of a forward in one list launch per type.
#define COHORT_WEIGHT_COPIES(S, C)                                             \
  template void launch_for_each_list<WeightsFromOihw<S, C>, S*, const float*>( \
      void*, std::span<const ForEachItem<WeightsFromOihw<S, C>, S*, const float*>>);
COHORT_WEIGHT_COPIES(float, F32)
COHORT_WEIGHT_COPIES(uint16_t, F16Codec)
COHORT_WEIGHT_COPIES(uint16_t, BF16Codec)

// Every conversion between two of the types, with or without a reorder.
#define COHORT_CONVERT(D, DC, S, SC)                                                                            \
  template void launch_for_each<Convert<D, DC, S, SC>, D*, const S*>(void*, int64_t, Convert<D, DC, S, SC>, D*, \
                                                                     const S*);
#define COHORT_CONVERT_FROM(S, SC)          \
  COHORT_CONVERT(float, F32, S, SC)         \
  COHORT_CONVERT(uint16_t, F16Codec, S, SC) \
  COHORT_CONVERT(uint16_t, BF16Codec, S, SC)

COHORT_CONVERT_FROM(float, F32)
COHORT_CONVERT_FROM(uint16_t, F16Codec)
COHORT_CONVERT_FROM(uint16_t, BF16Codec)

namespace {

constexpr unsigned kWarp = 32, kAllLanes = 0xffffffffu;

// Lane 0's total of every lane's v, handed to all lanes (one order for every lane).
__device__ double warp_total(double v) {
  for (unsigned o = kWarp / 2; o > 0; o /= 2) v += __shfl_down_sync(kAllLanes, v, o);
  return __shfl_sync(kAllLanes, v, 0);
}

__device__ float warp_max(float v) {
  for (unsigned o = kWarp / 2; o > 0; o /= 2) {
    const float other = __shfl_xor_sync(kAllLanes, v, o);
    v = other > v ? other : v;
  }
  return v;
}

// Each warp takes rows warp, warp + warps, …; returns (on every lane) the sum of its
// rows' losses in row order (kLoss; else 0). Every thread of the grid runs it with the
// same `rows`.
template <bool kLoss>
__device__ double softmax_xent_warp_rows(const SoftmaxXentLanes& f, int64_t rows) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  double total = 0;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    const float mx = warp_max(f.max_part(row, lane, kWarp));
    const double sum = warp_total(f.sum_part(row, lane, kWarp, mx));
    const double part = f.loss_part(row, lane, kWarp, mx, log(sum));
    if constexpr (kLoss) total += warp_total(part);
  }
  return total;
}

// One block of the most threads a block has: its warps' totals added in warp order, so
// that the loss is the same each run (a batch of 256 rows gives each warp 8).
constexpr unsigned kLossBlock = 1024;
__global__ void __launch_bounds__(kLossBlock)
    softmax_xent_loss_kernel(SoftmaxXentLanes f, int64_t rows, double* loss_sum) {
  __shared__ double warp_totals[kLossBlock / kWarp];
  const double total = softmax_xent_warp_rows<true>(f, rows);
  if (threadIdx.x % kWarp == 0) warp_totals[threadIdx.x / kWarp] = total;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double sum = 0;
  for (unsigned w = 0; w < kLossBlock / kWarp; ++w) sum += warp_totals[w];
  *loss_sum = sum;
}

__global__ void softmax_xent_grad_kernel(SoftmaxXentLanes f, int64_t rows) { softmax_xent_warp_rows<false>(f, rows); }

}  // namespace

void launch_softmax_xent_loss(void* stream, int64_t rows, const SoftmaxXentLanes& f, double* loss_sum) {
  softmax_xent_loss_kernel<<<1, kLossBlock, 0, static_cast<cudaStream_t>(stream)>>>(f, rows, loss_sum);
  check_launch("the softmax cross-entropy loss");
}

void launch_softmax_xent_grad(void* stream, int64_t rows, const SoftmaxXentLanes& f) {
  if (rows <= 0) return;
  softmax_xent_grad_kernel<<<blocks_for(rows * kWarp), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(f, rows);
  check_launch("the softmax cross-entropy gradient");
}

}  // namespace cohort::kernels::cuda
