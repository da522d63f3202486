#include "backend/cuda/cudnn_util.h"

#include <string>

namespace cohort::backend::cuda {

void check(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    cudaGetLastError();
    if (rc == cudaErrorMemoryAllocation)
      fail(Code::kOutOfMemory, call, ": out of device memory; lower batch_size or use a smaller model");
    fail(Code::kCuda, call, " failed: ", cudaGetErrorString(rc), " (error ", int(rc), ")");
  }
}

// cuDNN 9's statuses are a category (thousands) plus a specific code: out of device
// memory is an internal error (4004), host memory another (4003), and "not supported"
// comes in kinds (shape, layout, data type, …). cuDNN's own text for the last error,
// where it kept one, says which operand it refused.
void check(cudnnStatus_t rc, const char* call) {
  if (rc == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = "";
  cudnnGetLastErrorString(detail, sizeof detail);
  const std::string why = detail[0] ? cat(" (", detail, ")") : "";
  if (rc == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    fail(Code::kOutOfMemory, call, ": cuDNN is out of device memory; lower batch_size", why);
  if (rc == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    fail(Code::kOutOfMemory, call, ": cuDNN is out of host memory", why);
  const bool unsupported = CUDNN_STATUS_CATEGORY(rc) == CUDNN_STATUS_NOT_SUPPORTED;
  fail(Code::kCudnn, call, " failed: ", cudnnGetErrorString(rc), " (status ", int(rc), ")",
       unsupported ? ": this cuDNN does not support the shape, layout or data type" : "", why);
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
