#include "backend/backend.h"

#include "core/status.h"

namespace cohort::backend {
namespace {

void check_list(const char* what, const std::vector<Tensor>& tensors, const std::vector<Shape>& shapes, Device device) {
  if (tensors.size() != shapes.size())
    fail(Code::kInvalidArgument, "the plan needs ", shapes.size(), " ", what, " bindings, got ", tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const bool here = device.is_host() ? t.device().is_host() : t.device() == device;
    if (!here || t.dtype() != DType::kF32 || !t.is_contiguous() || t.shape() != shapes[i] ||
        (t.data() == nullptr && t.numel() > 0))
      fail(Code::kInvalidArgument, "binding ", what, "[", i, "] is ", t.describe(),
           t.is_contiguous() ? "" : " (not contiguous)", " but the plan needs contiguous f32", shape_string(shapes[i]),
           " on ", device.is_host() ? std::string("the host") : device.to_string(),
           " (plain layout: blocked, NHWC or reduced-precision copies stay inside the plan)");
  }
}

}  // namespace

void check_bindings(const NetSpec& spec, const Bindings& bindings, Device device) {
  check_list("params", bindings.params, spec.param_shapes, device);
  check_list("grads", bindings.grads, spec.param_shapes, device);
  check_list("states", bindings.states, spec.state_shapes, device);
}

PointwiseBackward parse_pointwise_backward(std::string_view value) {
  if (value == "auto") return PointwiseBackward::kAuto;
  if (value == "matmul") return PointwiseBackward::kMatmul;
  if (value == "convolution") return PointwiseBackward::kConvolution;
  fail(Code::kInvalidArgument, "cpu_pointwise_backward=", value,
       " is not a choice; expected auto, matmul or convolution");
}

CudaBatchNorm parse_cuda_batch_norm(std::string_view value) {
  if (value == "auto") return CudaBatchNorm::kAuto;
  if (value == "kernels") return CudaBatchNorm::kKernels;
  if (value == "cudnn") return CudaBatchNorm::kCudnn;
  fail(Code::kInvalidArgument, "cuda_batch_norm=", value, " is not a choice; expected auto, kernels or cudnn");
}

std::shared_ptr<Backend> make_backend(Device device, int threads, const BackendOptions& options) {
  switch (device.kind) {
    case Device::Kind::kCpu:
    case Device::Kind::kCudaHost:
      return make_cpu_backend(threads);
    case Device::Kind::kCuda:
      return make_cuda_backend(device.id, options);
    case Device::Kind::kTest:
      break;
  }
  fail(Code::kUnsupported, "no backend computes on ", device.to_string(), "; use device=cpu or a CUDA device");
}

}  // namespace cohort::backend
