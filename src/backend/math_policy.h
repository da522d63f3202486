// The f32 math policy of the CUDA backend: whether convolutions and matrix products
// may use TF32 tensor cores (10-bit mantissa products, f32 accumulation), as cuDNN and
// PyTorch do for convolutions by default. One choice for cuDNN and cuBLAS alike:
//   auto  TF32 on GPUs that have it (compute capability 8.0 and up), f32 FMA elsewhere
//   on    TF32 wherever the GPU has it
//   off   f32 FMA only (what the op tests compare with the CPU under)
// Reduced precisions (f16, bf16) use tensor cores whatever the policy.
#pragma once

#include <string>
#include <string_view>

namespace cohort::backend {

enum class Tf32 { kAuto, kOn, kOff };

// "auto|on|off"; throws kInvalidArgument naming the value.
Tf32 parse_tf32(std::string_view value);
const char* tf32_name(Tf32 t);

// Whether TF32 is used on a GPU of compute capability `major`.`minor`.
bool tf32_enabled(Tf32 policy, int major, int minor);

// One line for the run's header: "tf32=auto: TF32 tensor cores for convolutions and
// matrix products (sm_90)", or why not.
std::string describe_math(Tf32 policy, int major, int minor);

}  // namespace cohort::backend
