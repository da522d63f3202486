#include "comm/nccl/device_scale.h"

#include <cstdint>

#include "kernels/reduce.h"

namespace cohort::comm {
namespace {

template <typename S, typename Fn>
__global__ void apply(S* p, size_t n, Fn fn) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) p[i] = fn(p[i]);
}

template <typename S, typename Fn>
cudaError_t launch(void* data, size_t n, Fn fn, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  size_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;  // grid-stride loop covers the rest
  apply<S, Fn><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<S*>(data), n, fn);
  return cudaGetLastError();
}

}  // namespace

cudaError_t scale_on_device(void* data, size_t n, DType t, double factor, cudaStream_t stream) {
  using namespace kernels;
  if (n == 0 || factor == 1.0) return cudaSuccess;
  switch (t) {
    case DType::kF32:
      return launch<float>(data, n, ScalePlainFn<float>{static_cast<float>(factor)}, stream);
    case DType::kF64:
      return launch<double>(data, n, ScalePlainFn<double>{factor}, stream);
    case DType::kI32:
      return launch<int32_t>(data, n, ScaleFn<int32_t, PlainCodec<int32_t>, int32_t>{factor}, stream);
    case DType::kI64:
      return launch<int64_t>(data, n, ScaleFn<int64_t, PlainCodec<int64_t>, int64_t>{factor}, stream);
    case DType::kU8:
      return launch<uint8_t>(data, n, ScaleFn<uint8_t, PlainCodec<uint8_t>, uint8_t>{factor}, stream);
    case DType::kF16:
      return launch<uint16_t>(data, n, ScaleFn<uint16_t, F16Codec, float>{factor}, stream);
    case DType::kBF16:
      return launch<uint16_t>(data, n, ScaleFn<uint16_t, BF16Codec, float>{factor}, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cohort::comm
