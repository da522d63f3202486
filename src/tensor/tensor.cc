#include "tensor/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/status.h"
#include "core/strings.h"
#include "core/copy.h"
#include "tensor/allocator.h"
#include "tensor/device_api.h"

namespace cohort {

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  // The strides multiply every dimension (a zero one counted as 1), so that product
  // must fit too, even when a zero dimension makes the element count 0.
  int64_t n = 1, span = 1;
  for (int64_t d : shape) {
    if (d < 0) fail(Code::kInvalidArgument, "invalid shape ", shape_string(shape), ": dimensions must be >= 0");
    int64_t s = std::max<int64_t>(d, 1);
    if (span > std::numeric_limits<int64_t>::max() / s)
      fail(Code::kInvalidArgument, "invalid shape ", shape_string(shape), ": element count overflows");
    span *= s;
    n *= d;
  }
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::shared_ptr<Storage> allocate_host(size_t bytes, bool zero, std::shared_ptr<Allocator> allocator) {
  constexpr size_t kAlign = 64;
  size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) fail(Code::kOutOfMemory, "cannot allocate ", format_bytes(static_cast<double>(bytes)), " of host memory");
  if (zero) std::memset(p, 0, rounded);
  return std::make_shared<Storage>(
      p, bytes, Device{}, [](void* q) { std::free(q); }, std::move(allocator));
}

Tensor Tensor::over_storage(std::shared_ptr<Storage> storage, const Shape& shape, int64_t numel, DType dtype) {
  Tensor t;
  t.numel_ = numel;
  t.data_ = storage->data();
  t.device_ = storage->device();
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  const int64_t n = shape_numel(shape);
  return over_storage(allocate_host(static_cast<size_t>(n) * dtype_size(dtype), true), shape, n, dtype);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& allocator, const Stream& stream) {
  const int64_t n = shape_numel(shape);
  return over_storage(allocator.allocate(static_cast<size_t>(n) * dtype_size(dtype), stream), shape, n, dtype);
}

Tensor Tensor::empty_like(const Tensor& like, const Shape& shape, DType dtype, const Stream& stream) {
  if (like.storage_ && like.storage_->allocator()) return empty(shape, dtype, *like.storage_->allocator(), stream);
  if (like.device().is_host()) {
    const int64_t n = shape_numel(shape);
    return over_storage(allocate_host(static_cast<size_t>(n) * dtype_size(dtype), false), shape, n, dtype);
  }
  fail(Code::kInvalidArgument, "cannot allocate a tensor like ", like.describe(),
       ": its memory was not allocated by cohort, so there is no allocator for ", like.device().to_string());
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device, std::vector<int64_t> strides) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  if (!(data != nullptr || t.numel_ == 0))
    fail(Code::kInvalidArgument, "tensor of shape ", shape_string(shape), " has a NULL data pointer");
  if (strides.empty()) strides = contiguous_strides(shape);
  require(strides.size() == shape.size(), "tensor has ", shape.size(), " dimensions but ", strides.size(), " strides");
  t.data_ = data;
  t.shape_ = shape;
  t.strides_ = std::move(strides);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

namespace {
Device device_from_dlpack(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
      return {Device::Kind::kCpu, 0};
    case kDLCUDA:
      return {Device::Kind::kCuda, d.device_id};
    case kDLCUDAHost:
      return {Device::Kind::kCudaHost, 0};
    default:
      fail(Code::kInvalidArgument, "unsupported DLPack device type ", int(d.device_type),
           ": expected CPU (1), CUDA (2) or CUDA host (3)");
  }
}
}  // namespace

Tensor Tensor::from_dlpack(const DLTensor& dl) {
  require(dl.ndim >= 0 && dl.ndim <= 32, "DLTensor has invalid ndim ", dl.ndim);
  require(dl.ndim == 0 || dl.shape != nullptr, "DLTensor has ndim ", dl.ndim, " but a NULL shape");
  Shape shape(dl.shape, dl.shape + dl.ndim);
  std::vector<int64_t> strides;
  if (dl.strides) strides.assign(dl.strides, dl.strides + dl.ndim);
  void* data = dl.data ? static_cast<char*>(dl.data) + dl.byte_offset : nullptr;
  return wrap(data, shape, cohort::from_dlpack(dl.dtype), device_from_dlpack(dl.device), std::move(strides));
}

Tensor Tensor::from_dlpack(DLManagedTensor* managed) {
  require(managed != nullptr, "DLManagedTensor is NULL");
  Tensor t;
  try {
    t = from_dlpack(managed->dl_tensor);
  } catch (...) {
    if (managed->deleter) managed->deleter(managed);
    throw;
  }
  t.storage_ = std::make_shared<Storage>(t.data_, t.nbytes(), t.device_, [managed](void*) {
    if (managed->deleter) managed->deleter(managed);
  });
  return t;
}

namespace {
// Keeps the exported tensor's storage, shape and strides alive until the consumer
// calls the deleter.
struct ExportContext {
  Tensor tensor;
  Shape shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed;
};
}  // namespace

DLManagedTensor* Tensor::to_dlpack() const {
  auto ctx = std::make_unique<ExportContext>();
  ctx->tensor = *this;
  ctx->shape = shape_;
  ctx->strides = strides_;
  ctx->managed.dl_tensor = dlpack_view();
  ctx->managed.dl_tensor.shape = ctx->shape.data();
  ctx->managed.dl_tensor.strides = ctx->strides.data();
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = [](DLManagedTensor* self) { delete static_cast<ExportContext*>(self->manager_ctx); };
  return &ctx.release()->managed;
}

DLTensor Tensor::dlpack_view() const {
  DLTensor dl{};
  dl.data = data_;
  switch (device_.kind) {
    case Device::Kind::kCpu:
      dl.device = {kDLCPU, 0};
      break;
    case Device::Kind::kCuda:
      dl.device = {kDLCUDA, device_.id};
      break;
    case Device::Kind::kCudaHost:
      dl.device = {kDLCUDAHost, 0};
      break;
    case Device::Kind::kTest:
      fail(Code::kUnsupported, "a tensor on the test device has no DLPack device type");
  }
  dl.ndim = ndim();
  dl.dtype = cohort::to_dlpack(dtype_);
  dl.shape = const_cast<int64_t*>(shape_.data());
  dl.strides = const_cast<int64_t*>(strides_.data());
  dl.byte_offset = 0;
  return dl;
}

namespace {

// The stream a copy involving `d` runs on: `s` when it belongs to d, else d's default.
Stream stream_for(Device d, const Stream& s) {
  if (s.device() == d) return s;
  return Stream(d, nullptr);
}

void require_contiguous(const Tensor& t, const char* what, const char* role) {
  if (!t.is_contiguous()) fail(Code::kInvalidArgument, what, ": the ", role, " ", t.describe(), " is not contiguous");
  if (!t.defined()) fail(Code::kInvalidArgument, what, ": the ", role, " ", t.describe(), " has no data");
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src, const Stream& stream) {
  require_contiguous(dst, "copy", "destination");
  require_contiguous(src, "copy", "source");
  if (dst.dtype() != src.dtype() || dst.numel() != src.numel())
    fail(Code::kInvalidArgument, "copy: cannot copy ", src.describe(), " into ", dst.describe(),
         ": dtypes and element counts must agree");
  const size_t bytes = src.nbytes();
  if (bytes == 0 || dst.data() == src.data()) return;
  if (dst.device().is_host() && src.device().is_host()) {
    copy_bytes(dst.data(), src.data(), bytes);
    return;
  }
  // One side is a device: that device's API runs the copy (host memory on the other side).
  const Device d = dst.device().is_host() ? src.device() : dst.device();
  if (!dst.device().is_host() && !src.device().is_host() && !(dst.device() == src.device()) &&
      dst.device().kind != src.device().kind)
    fail(Code::kUnsupported, "copy: no direct copy from ", src.describe(), " to ", dst.describe(),
         "; copy through host memory");
  device_api(d.kind).copy(dst.data(), src.data(), bytes, stream_for(d, stream));
}

void zero(const Tensor& t, const Stream& stream) {
  require_contiguous(t, "zero", "tensor");
  if (t.nbytes() == 0) return;
  device_api(t.device().kind).zero(t.data(), t.nbytes(), stream_for(t.device(), stream));
}

Tensor to_host(const Tensor& t, const Stream& stream) {
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  copy(out, t, stream);
  if (!stream.is_host()) device_api(stream.device().kind).synchronize(stream);
  return out;
}

Tensor clone_to(const Tensor& t, Allocator& allocator, const Stream& stream) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), allocator, stream);
  copy(out, t, stream);
  return out;
}

bool Tensor::is_contiguous() const {
  // Strides of size-1 dimensions do not matter (DLPack producers set them freely).
  // Walked from the innermost dimension, without allocating: called per tensor per step.
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= std::max<int64_t>(shape_[i], 1);  // as contiguous_strides
  }
  return true;
}

std::string Tensor::describe() const {
  return cat(dtype_name(dtype_), shape_string(shape_), " on ", device_.to_string());
}

}  // namespace cohort
