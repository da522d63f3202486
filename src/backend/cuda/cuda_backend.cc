// The CUDA backend: cuDNN and cuBLAS handles on the runtime's device. It runs no
// network yet (compile() reports kUnsupported); element-wise work will reuse the
// kernels/ functors that the CPU tests cover.
#include "backend/backend.h"
#include "core/status.h"

#if COHORT_HAVE_CUDA
#  include <cublas_v2.h>
#  include <cuda_runtime_api.h>
#  include <cudnn.h>
#endif

namespace cohort::backend {

#if COHORT_HAVE_CUDA
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) fail(Code::kCuda, "cudaSetDevice(", device, "): ", cudaGetErrorString(err));
    cudnnStatus_t ds = cudnnCreate(&cudnn_);
    if (ds != CUDNN_STATUS_SUCCESS) fail(Code::kCudnn, "cudnnCreate: ", cudnnGetErrorString(ds));
    cublasStatus_t bs = cublasCreate(&cublas_);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      cudnnDestroy(cudnn_);
      fail(Code::kCublas, "cublasCreate failed with status ", static_cast<int>(bs));
    }
  }
  ~CudaBackend() override {
    cublasDestroy(cublas_);
    cudnnDestroy(cudnn_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  std::string name() const override { return cat("cuda:", device_); }
  std::unique_ptr<Plan> compile(const NetSpec&, const Bindings&, const PlanOptions&) override {
    fail(Code::kUnsupported, kCudaCannotTrain, "; use device=cpu");
  }

 private:
  int device_;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(int device) { return std::make_shared<CudaBackend>(device); }

#else

std::shared_ptr<Backend> make_cuda_backend(int device) {
  fail(Code::kUnsupported, "cannot use CUDA device ", device, ": this build of cohort has no CUDA backend");
}

#endif

bool cuda_backend_trains() { return false; }

}  // namespace cohort::backend
