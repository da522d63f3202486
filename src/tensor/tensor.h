// Tensor: a typed, shaped, strided view of memory on a device, owning a reference to
// its storage (or borrowing caller memory); copies and fills that follow the tensors'
// devices. DLPack import/export lives here too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

#include "tensor/device.h"
#include "tensor/dtype.h"

namespace cohort {

class Allocator;

using Shape = std::vector<int64_t>;
std::string shape_string(const Shape& shape);  // "[2, 3, 4]"
int64_t shape_numel(const Shape& shape);       // throws kInvalidArgument on negative dims or overflow

// Memory with a deleter; shared by tensors viewing it. Memory an allocator handed out
// keeps that allocator alive (Tensor::empty_like allocates from it again).
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter,
          std::shared_ptr<Allocator> allocator = nullptr)
      : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)), allocator_(std::move(allocator)) {}
  ~Storage() {
    if (deleter_) deleter_(data_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  const std::shared_ptr<Allocator>& allocator() const { return allocator_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void(void*)> deleter_;
  std::shared_ptr<Allocator> allocator_;
};

// 64-byte aligned host memory (zeroed on request). Throws kOutOfMemory naming the size.
std::shared_ptr<Storage> allocate_host(size_t bytes, bool zero = false, std::shared_ptr<Allocator> allocator = nullptr);

class Tensor {
 public:
  Tensor() = default;
  // A new contiguous host tensor (64-byte aligned, zeroed).
  static Tensor empty(const Shape& shape, DType dtype);
  // A new contiguous tensor from `allocator`, for use on `stream`; not zeroed.
  static Tensor empty(const Shape& shape, DType dtype, Allocator& allocator, const Stream& stream = {});
  // A new contiguous tensor on like's device, from the allocator like's memory came
  // from (host memory when like borrows host memory); not zeroed. Throws
  // kInvalidArgument for borrowed device memory (no allocator to ask).
  static Tensor empty_like(const Tensor& like, const Shape& shape, DType dtype, const Stream& stream = {});
  static Tensor empty_like(const Tensor& like, const Stream& stream = {}) {
    return empty_like(like, like.shape(), like.dtype(), stream);
  }
  // A view of caller memory; the caller keeps it alive (borrowed).
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device = {},
                     std::vector<int64_t> strides = {});
  // A view of a DLTensor (borrowed: valid while the DLTensor's memory lives).
  static Tensor from_dlpack(const DLTensor& t);
  // Takes ownership of a managed tensor: its deleter runs when the last view goes.
  static Tensor from_dlpack(DLManagedTensor* managed);

  // A DLManagedTensor viewing this tensor and keeping its storage alive; the consumer
  // calls its deleter exactly once.
  DLManagedTensor* to_dlpack() const;
  // A DLTensor view; shape and strides point into this Tensor (valid while it lives).
  DLTensor dlpack_view() const;

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }  // in elements
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool defined() const { return data_ != nullptr || numel_ == 0; }
  std::string describe() const;  // "f32[2, 3] on cpu"
  // The storage this tensor views (null for borrowed memory).
  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  static Tensor over_storage(std::shared_ptr<Storage> storage, const Shape& shape, int64_t numel, DType dtype);

  std::shared_ptr<Storage> storage_;  // null for borrowed views
  void* data_ = nullptr;
  Shape shape_;
  std::vector<int64_t> strides_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  Device device_;
};

std::vector<int64_t> contiguous_strides(const Shape& shape);

// Copies src into dst: same dtype and element count, both contiguous, any devices. A
// copy that involves a device is ordered on `stream` when it is that device's stream
// (the caller synchronises before the host reads the result); with a host stream it
// waits for all the work enqueued on that device, runs on its default stream and is
// complete on return. Host to host copies run at once.
void copy(const Tensor& dst, const Tensor& src, const Stream& stream = {});
// Sets every byte of t to zero (on `stream` as copy() does). t must be contiguous.
void zero(const Tensor& t, const Stream& stream = {});
// A contiguous host copy of t, complete on return (waits for `stream`).
Tensor to_host(const Tensor& t, const Stream& stream = {});
// A contiguous copy of t from `allocator`, ordered on `stream`.
Tensor clone_to(const Tensor& t, Allocator& allocator, const Stream& stream = {});

}  // namespace cohort
