// Element access by index for tensors of any dtype, in double: what the tests use to
// fill inputs and read results (f16/bf16 through the conversions that kernels_test checks).
#pragma once

#include <cstdint>

#include "kernels/half.h"
#include "tensor/tensor.h"

namespace cohort::test {

inline double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data_as<float>()[i];
    case DType::kF64:
      return t.data_as<double>()[i];
    case DType::kI32:
      return t.data_as<int32_t>()[i];
    case DType::kI64:
      return static_cast<double>(t.data_as<int64_t>()[i]);
    case DType::kU8:
      return t.data_as<uint8_t>()[i];
    case DType::kF16:
      return kernels::half_to_float(t.data_as<uint16_t>()[i]);
    case DType::kBF16:
      return kernels::bf16_to_float(t.data_as<uint16_t>()[i]);
  }
  return 0;
}

inline void set(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      t.data_as<double>()[i] = v;
      break;
    case DType::kI32:
      t.data_as<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::kI64:
      t.data_as<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    case DType::kU8:
      t.data_as<uint8_t>()[i] = static_cast<uint8_t>(v);
      break;
    case DType::kF16:
      t.data_as<uint16_t>()[i] = kernels::float_to_half(static_cast<float>(v));
      break;
    case DType::kBF16:
      t.data_as<uint16_t>()[i] = kernels::float_to_bf16(static_cast<float>(v));
      break;
  }
}

}  // namespace cohort::test
