// COHORT_HD marks element-wise functions compiled for host and device: the CPU loops
// and the CUDA kernels call the same code, so CPU tests cover the GPU math.
#pragma once

#if defined(__CUDACC__)
#  define COHORT_HD __host__ __device__ __forceinline__
#else
#  define COHORT_HD inline
#endif
