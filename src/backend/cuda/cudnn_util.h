// cuDNN, cuBLAS and CUDA runtime calls as the CUDA backend makes them: status checks
// that name the call, RAII descriptors, and the 4-D tensor descriptor of a value.
// CUDA builds only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <utility>

#include "backend/cuda/tensor_layout.h"
#include "core/status.h"
#include "tensor/dtype.h"

namespace cohort::backend::cuda {

void check(cudaError_t rc, const char* call);
void check(cudnnStatus_t rc, const char* call);
void check(cublasStatus_t rc, const char* call);

// A cuDNN descriptor owned by this object.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { check(Create(&d_), "cudnnCreate*Descriptor"); }
  ~Descriptor() {
    if (d_) Destroy(d_);
  }
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  T get() const { return d_; }
  operator T() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using ActDesc =
    Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;
using LrnDesc = Descriptor<cudnnLRNDescriptor_t, cudnnCreateLRNDescriptor, cudnnDestroyLRNDescriptor>;

// cuDNN's name for f32, f16 or bf16.
cudnnDataType_t cudnn_type(DType t);
// A tensor descriptor of `d` holding `dtype` (f32, f16 or bf16).
TensorDesc tensor_desc(const Desc4& d, DType dtype = DType::kF32);

// The scaling factors cuDNN and cuBLAS read from host memory.
inline constexpr float kOne = 1.f, kZero = 0.f;
inline const float* beta_for(bool accumulate) { return accumulate ? &kOne : &kZero; }

}  // namespace cohort::backend::cuda
