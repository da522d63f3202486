// The training step's element-wise work on CUDA: optimizer updates, sums over passes,
// scaling, gradient compression, loss scaling and the LARS norms — the kernels/
// functors the host loops run, instantiated for the argument types their callers
// pass (src/optim, src/train).
#include "kernels/cuda/launch.cuh"
#include "kernels/f16_compress.h"
#include "kernels/optim_update.h"

namespace cohort::kernels::cuda {

#define COHORT_FOR_EACH(F, ...) template void launch_for_each<F, __VA_ARGS__>(void*, int64_t, F, __VA_ARGS__);
#define COHORT_REDUCE(T, Map, Combine) \
  template void launch_reduce_into<T, Map, Combine>(void*, int64_t, Map, Combine, T*);

COHORT_FOR_EACH(AccumulateScaled, float*, const float*)
COHORT_FOR_EACH(Scale, float*)
COHORT_FOR_EACH(Zero, float*)
COHORT_FOR_EACH(SetStepValues, StepValues*)
COHORT_FOR_EACH(CompressF16, uint16_t*, const float*)
COHORT_FOR_EACH(CompressBF16, uint16_t*, const float*)
COHORT_FOR_EACH(DecompressF16, float*, const uint16_t*)
COHORT_FOR_EACH(DecompressBF16, float*, const uint16_t*)
COHORT_REDUCE(double, SquareF64, Plus)
COHORT_REDUCE(uint32_t, UnscaleCount, Plus)

#define COHORT_FOR_EACH_LIST(F, ...) \
  template void launch_for_each_list<F, __VA_ARGS__>(void*, std::span<const ForEachItem<F, __VA_ARGS__>>);
COHORT_FOR_EACH_LIST(SgdUpdate, float*, const float*, float*)
COHORT_FOR_EACH_LIST(AdamUpdate, float*, const float*, float*, float*)
COHORT_FOR_EACH_LIST(LarsUpdate, float*, const float*, float*)
#define COHORT_REDUCE_EACH(T, Map, Combine) \
  template void launch_reduce_each_into<T, Map, Combine>(void*, std::span<const ReduceToItem<T, Map>>, Combine);
COHORT_REDUCE_EACH(uint32_t, UnscaleCount, Plus)
COHORT_REDUCE_EACH(double, SquareF64, Plus)

}  // namespace cohort::kernels::cuda
