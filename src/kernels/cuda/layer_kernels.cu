// The CUDA backend's own element-wise and data-movement kernels: the kernels/ functors
// of layer_ops.h and pool.h, instantiated for the argument types the backend passes.
#include "kernels/cuda/launch.cuh"
#include "kernels/layer_ops.h"
#include "kernels/optim_update.h"
#include "kernels/pool.h"

namespace cohort::kernels::cuda {

#define COHORT_FOR_EACH(F, ...) template void launch_for_each<F, __VA_ARGS__>(void*, int64_t, F, __VA_ARGS__);

COHORT_FOR_EACH(Fill, float*)
COHORT_FOR_EACH(ToNchw, float*, const float*)
COHORT_FOR_EACH(ToNhwc, float*, const float*)
COHORT_FOR_EACH(DropoutForward, float*, const float*)
COHORT_FOR_EACH(DropoutBackward, float*, const float*)
COHORT_FOR_EACH(LeakyReluForward, float*, const float*)
COHORT_FOR_EACH(LeakyReluBackward, float*, const float*, const float*)
COHORT_FOR_EACH(Sum2, float*, const float*, const float*)
COHORT_FOR_EACH(CopyTo, float*, const float*)
COHORT_FOR_EACH(CopyRows, float*, const float*)
COHORT_FOR_EACH(ShortcutAForward, float*, const float*)
COHORT_FOR_EACH(ShortcutABackward, float*, const float*)
COHORT_FOR_EACH(PoolForward, float*, const float*)
COHORT_FOR_EACH(PoolBackward, float*, const float*, const float*, const float*)
template void launch_for_each<SoftmaxXentRows>(void*, int64_t, SoftmaxXentRows);
template void launch_reduce_into<double, SoftmaxXentLoss, Plus>(void*, int64_t, SoftmaxXentLoss, Plus, double*);

}  // namespace cohort::kernels::cuda
