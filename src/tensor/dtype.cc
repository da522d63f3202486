#include "tensor/dtype.h"

#include "core/status.h"
#include "core/strings.h"

namespace cohort {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF64:
      return "f64";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  std::string n = to_lower(name);
  if (n == "f32" || n == "fp32" || n == "float32" || n == "float") return DType::kF32;
  if (n == "f16" || n == "fp16" || n == "float16" || n == "half") return DType::kF16;
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "f64" || n == "fp64" || n == "float64" || n == "double") return DType::kF64;
  if (n == "i32" || n == "int32" || n == "int") return DType::kI32;
  if (n == "i64" || n == "int64") return DType::kI64;
  if (n == "u8" || n == "uint8") return DType::kU8;
  fail(Code::kInvalidArgument, "unknown dtype '", name, "': expected one of f32, f16, bf16, f64, i32, i64, u8");
}

DLDataType to_dlpack(DType t) {
  switch (t) {
    case DType::kF32:
      return {kDLFloat, 32, 1};
    case DType::kF16:
      return {kDLFloat, 16, 1};
    case DType::kBF16:
      return {kDLBfloat, 16, 1};
    case DType::kF64:
      return {kDLFloat, 64, 1};
    case DType::kI32:
      return {kDLInt, 32, 1};
    case DType::kI64:
      return {kDLInt, 64, 1};
    case DType::kU8:
      return {kDLUInt, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

DType from_dlpack(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
    if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
    if (t.code == kDLFloat && t.bits == 64) return DType::kF64;
    if (t.code == kDLInt && t.bits == 32) return DType::kI32;
    if (t.code == kDLInt && t.bits == 64) return DType::kI64;
    if (t.code == kDLUInt && t.bits == 8) return DType::kU8;
  }
  fail(Code::kInvalidArgument, "unsupported DLPack dtype (code ", int(t.code), ", bits ", int(t.bits), ", lanes ",
       t.lanes, "): expected f32, f16, bf16, f64, i32, i64 or u8 with 1 lane");
}

}  // namespace cohort
