// The CUDA backend: cuDNN and cuBLAS handles on one device, its compute stream, the
// algorithm cache its plans share, and the f32 math policy (backend/math_policy.h),
// applied to cuBLAS here and to each convolution by its plan. Its plans train at f32,
// f16 and bf16 (bf16 from compute capability 8.0): backend/cuda/plan.h.
#include "backend/backend.h"
#include "core/logging.h"
#include "core/status.h"

#if COHORT_HAVE_CUDA
#  include "backend/cuda/plan.h"
#  include "tensor/device_api.h"
#endif

namespace cohort::backend {

#if COHORT_HAVE_CUDA
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const BackendOptions& options) {
    ctx_.device = device;
    cuda::check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop{};
    cuda::check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    gpu_name_ = prop.name;
    major_ = prop.major;
    minor_ = prop.minor;
    // Before any handle exists: a bad file stops the backend with nothing to release.
    if (!options.algorithm_cache.empty())
      ctx_.algos.attach(options.algorithm_cache, cat(gpu_name_, " sm_", major_, minor_, " cuDNN ", cudnnGetVersion()));
    ctx_.policy = options.tf32;
    ctx_.tf32 = tf32_enabled(options.tf32, major_, minor_);
    ctx_.graphs = options.cuda_graphs;
    ctx_.batch_norm = options.batch_norm;
    ctx_.memory = options.memory ? options.memory : make_caching_allocator(Device::cuda(device));
    require(ctx_.memory->device() == Device::cuda(device), "the CUDA backend on cuda:", device,
            " was given an allocator of ", ctx_.memory->device().to_string());
    cuda::check(cudnnCreate(&ctx_.cudnn), "cudnnCreate");
    cublasStatus_t bs = cublasCreate(&ctx_.cublas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      cudnnDestroy(ctx_.cudnn);
      cuda::check(bs, "cublasCreate");
    }
    cuda::check(cublasSetMathMode(ctx_.cublas, ctx_.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                "cublasSetMathMode");
    stream_ = OwnedStream(Device::cuda(device));
    ctx_.stream = stream_.get();
  }
  ~CudaBackend() override {
    cublasDestroy(ctx_.cublas);
    cudnnDestroy(ctx_.cudnn);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return cat("cuda:", ctx_.device); }
  std::string describe() const override {
    return cat("cuda:", ctx_.device, " (", gpu_name_, ", cuDNN ", cudnnGetVersion(), "), ",
               describe_math(ctx_.policy, major_, minor_), ctx_.graphs ? ", CUDA graphs" : "");
  }
  Device device() const override { return Device::cuda(ctx_.device); }
  Stream stream() const override { return stream_.get(); }
  std::unique_ptr<Plan> compile(const NetSpec& spec, const Bindings& bindings, const PlanOptions& options) override {
    require(options.batch > 0, "batch size must be positive, got ", options.batch);
    if (options.precision == Precision::kBF16 && major_ < 8)
      fail(Code::kUnsupported, "precision=bf16 is not available on ", name(), " (", gpu_name_, ", sm_", major_, minor_,
           "): it needs compute capability 8.0 or newer (bf16 tensor cores). Use precision=f16 or f32 on it");
    check_bindings(spec, bindings, device());
    auto plan = std::make_unique<cuda::CudaPlan>(ctx_, spec, bindings, options);
    try {
      ctx_.algos.save();  // the plan's searches are done
    } catch (const Error& e) {
      COHORT_LOG_WARN("the convolution algorithms were not kept: ", e.what());
    }
    return plan;
  }

 private:
  cuda::Context ctx_;
  OwnedStream stream_;
  std::string gpu_name_;
  int major_ = 0, minor_ = 0;
};

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(int device, const BackendOptions& options) {
  return std::make_shared<CudaBackend>(device, options);
}

bool cuda_backend_trains() { return true; }

#else

std::shared_ptr<Backend> make_cuda_backend(int device, const BackendOptions&) {
  fail(Code::kUnsupported, "cannot use CUDA device ", device, ": this build of cohort has no CUDA backend");
}

bool cuda_backend_trains() { return false; }

#endif

}  // namespace cohort::backend
