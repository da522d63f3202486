#include <gtest/gtest.h>

#include <cstdint>

#include "core/status.h"
#include "tensor/tensor.h"

namespace cohort {
namespace {

TEST(DType, SizesNamesAndDlpackRoundTrip) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kI64, DType::kU8}) {
    EXPECT_EQ(from_dlpack(to_dlpack(t)), t);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
    EXPECT_EQ(to_dlpack(t).bits, dtype_size(t) * 8);
  }
  EXPECT_EQ(parse_dtype("fp16"), DType::kF16);
  EXPECT_THROW(parse_dtype("f8"), Error);
  EXPECT_THROW(from_dlpack(DLDataType{kDLFloat, 32, 4}), Error);
  EXPECT_THROW(from_dlpack(DLDataType{kDLComplex, 64, 1}), Error);
}

TEST(Tensor, EmptyIsZeroedAlignedAndContiguous) {
  Tensor t = Tensor::empty({2, 3, 5}, DType::kF32);
  EXPECT_EQ(t.numel(), 30);
  EXPECT_EQ(t.nbytes(), 120u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{15, 5, 1}));
  for (int i = 0; i < 30; ++i) EXPECT_EQ(t.data_as<float>()[i], 0.0f);
  EXPECT_EQ(t.describe(), "f32[2, 3, 5] on cpu");
}

TEST(Tensor, BadShapesAreRejected) {
  EXPECT_THROW(Tensor::empty({2, -1}, DType::kF32), Error);
  EXPECT_THROW(shape_numel({INT64_MAX, 4}), Error);
  // A zero dimension makes 0 elements, but strides still multiply the others.
  EXPECT_THROW(Tensor::empty({0, INT64_MAX / 2, 16}, DType::kF32), Error);
  EXPECT_THROW(Tensor::wrap(nullptr, {3}, DType::kF32), Error);
  EXPECT_NO_THROW(Tensor::wrap(nullptr, {0, 3}, DType::kF32));
  float x[6];
  EXPECT_THROW(Tensor::wrap(x, {2, 3}, DType::kF32, {}, {1}), Error);
}

TEST(Tensor, DlpackExportKeepsStorageAlive) {
  DLManagedTensor* managed = nullptr;
  {
    Tensor t = Tensor::empty({4, 2}, DType::kI32);
    t.data_as<int32_t>()[7] = 42;
    managed = t.to_dlpack();
  }
  ASSERT_NE(managed, nullptr);
  EXPECT_EQ(managed->dl_tensor.ndim, 2);
  EXPECT_EQ(managed->dl_tensor.shape[0], 4);
  EXPECT_EQ(managed->dl_tensor.strides[0], 2);
  EXPECT_EQ(managed->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(static_cast<int32_t*>(managed->dl_tensor.data)[7], 42);
  managed->deleter(managed);
}

TEST(Tensor, DlpackImportBorrowsAndHonoursOffsetAndStrides) {
  float data[12];
  for (int i = 0; i < 12; ++i) data[i] = static_cast<float>(i);
  int64_t shape[2] = {3, 2};
  int64_t strides[2] = {4, 1};
  DLTensor dl{};
  dl.data = data;
  dl.byte_offset = sizeof(float);
  dl.device = {kDLCPU, 0};
  dl.ndim = 2;
  dl.dtype = {kDLFloat, 32, 1};
  dl.shape = shape;
  dl.strides = strides;
  Tensor t = Tensor::from_dlpack(dl);
  EXPECT_EQ(t.data_as<float>()[0], 1.0f);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  dl.strides = nullptr;
  EXPECT_TRUE(Tensor::from_dlpack(dl).is_contiguous());
  dl.device = {kDLOpenCL, 0};
  EXPECT_THROW(Tensor::from_dlpack(dl), Error);
}

TEST(Tensor, ManagedImportCallsDeleterOnce) {
  static int deleted = 0;
  deleted = 0;
  Tensor source = Tensor::empty({5}, DType::kF64);
  DLManagedTensor* managed = source.to_dlpack();
  auto original = managed->deleter;
  managed->deleter = [](DLManagedTensor* self) {
    deleted++;
    delete static_cast<DLManagedTensor*>(nullptr);  // no-op; the original frees below
    (void)self;
  };
  {
    Tensor a = Tensor::from_dlpack(managed);
    Tensor b = a;
    EXPECT_EQ(deleted, 0);
  }
  EXPECT_EQ(deleted, 1);
  original(managed);
}

TEST(Tensor, SizeOneDimensionStridesDoNotBreakContiguity) {
  float x[4];
  Tensor t = Tensor::wrap(x, {1, 4}, DType::kF32, {}, {99, 1});
  EXPECT_TRUE(t.is_contiguous());
}

}  // namespace
}  // namespace cohort
