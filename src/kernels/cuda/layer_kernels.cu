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

template void launch_for_each<SoftmaxXentRows>(void*, int64_t, SoftmaxXentRows);
template void launch_reduce_into<double, SoftmaxXentLoss, Plus>(void*, int64_t, SoftmaxXentLoss, Plus, double*);

}  // namespace cohort::kernels::cuda
