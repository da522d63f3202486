// Element-wise scaling of device memory for the NCCL transport: a CUDA kernel applying
// the kernels/ ScaleFn functors (the same math as the host loops, which CPU tests cover).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "tensor/dtype.h"

namespace cohort::comm {

// Multiplies n elements of dtype t at `data` (device memory) by `factor`, queued on
// `stream`. Returns the launch status (the caller synchronises the stream).
cudaError_t scale_on_device(void* data, size_t n, DType t, double factor, cudaStream_t stream);

}  // namespace cohort::comm
