// Element types and their DLPack codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <dlpack/dlpack.h>

namespace cohort {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI32, kI64, kU8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);      // "f32", "f16", ...
DType parse_dtype(std::string_view name);  // also accepts fp32/fp16/float32/...; throws kInvalidArgument
DLDataType to_dlpack(DType t);
DType from_dlpack(DLDataType t);  // throws kInvalidArgument for unsupported types (lanes != 1 too)

}  // namespace cohort
