#include "backend/cuda/cudnn_util.h"

namespace cohort::backend::cuda {

void check(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    cudaGetLastError();
    if (rc == cudaErrorMemoryAllocation)
      fail(Code::kOutOfMemory, call, ": out of device memory; lower batch_size or use a smaller model");
    fail(Code::kCuda, call, " failed: ", cudaGetErrorString(rc), " (error ", int(rc), ")");
  }
}

void check(cudnnStatus_t rc, const char* call) {
  if (rc == CUDNN_STATUS_SUCCESS) return;
  if (rc == CUDNN_STATUS_ALLOC_FAILED) fail(Code::kOutOfMemory, call, ": cuDNN is out of memory; lower batch_size");
  fail(Code::kCudnn, call, " failed: ", cudnnGetErrorString(rc),
       rc == CUDNN_STATUS_NOT_SUPPORTED ? " (the shape or data type is not supported by this cuDNN)" : "");
}

void check(cublasStatus_t rc, const char* call) {
  if (rc == CUBLAS_STATUS_SUCCESS) return;
  if (rc == CUBLAS_STATUS_ALLOC_FAILED) fail(Code::kOutOfMemory, call, ": cuBLAS is out of memory");
  fail(Code::kCublas, call, " failed: ", cublasGetStatusString(rc), " (status ", int(rc), ")");
}

TensorDesc tensor_desc(const Desc4& d) {
  TensorDesc t;
  check(cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 4, d.dims.data(), d.strides.data()),
        "cudnnSetTensorNdDescriptor");
  return t;
}

}  // namespace cohort::backend::cuda
