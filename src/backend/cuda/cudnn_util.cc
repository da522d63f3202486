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

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDNN_DATA_FLOAT;
    case DType::kF16:
      return CUDNN_DATA_HALF;
    case DType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    default:
      fail(Code::kInternal, "cuDNN values are f32, f16 or bf16, not ", dtype_name(t));
  }
}

TensorDesc tensor_desc(const Desc4& d, DType dtype) {
  TensorDesc t;
  check(cudnnSetTensorNdDescriptor(t, cudnn_type(dtype), 4, d.dims.data(), d.strides.data()),
        "cudnnSetTensorNdDescriptor");
  return t;
}

}  // namespace cohort::backend::cuda
