// Evaluation metrics on CUDA: the top-k hits and cross-entropy of rows of logits
// (kernels/metrics.h), for i32 and i64 labels.
#include "kernels/cuda/launch.cuh"
#include "kernels/metrics.h"
#include "kernels/optim_update.h"

namespace cohort::kernels::cuda {

template void launch_reduce_into<uint64_t, TopKHits<int32_t>, Plus>(void*, int64_t, TopKHits<int32_t>, Plus, uint64_t*);
template void launch_reduce_into<uint64_t, TopKHits<int64_t>, Plus>(void*, int64_t, TopKHits<int64_t>, Plus, uint64_t*);
template void launch_reduce_into<double, RowCrossEntropy<int32_t>, Plus>(void*, int64_t, RowCrossEntropy<int32_t>, Plus,
                                                                         double*);
template void launch_reduce_into<double, RowCrossEntropy<int64_t>, Plus>(void*, int64_t, RowCrossEntropy<int64_t>, Plus,
                                                                         double*);

}  // namespace cohort::kernels::cuda
