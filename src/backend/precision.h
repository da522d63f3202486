// Mixed precision, one policy for every backend: parameters, gradients, optimizer
// state, batch-norm statistics and the loss stay f32 (master weights); layers compute
// in the run's precision with a cast wherever a value crosses from an f32 layer to a
// reduced one or back; the layers that always compute in f32 are listed once, in
// compute_dtype(); f16 needs loss scaling, bf16 (f32's exponent range) does not.
#pragma once

#include <string>
#include <string_view>

#include "backend/net_spec.h"
#include "tensor/dtype.h"

namespace cohort::backend {

enum class Precision { kF32, kBF16, kF16 };

// "f32|bf16|f16" and the spellings the option registry accepts (fp32, bfloat16, ...);
// throws kInvalidArgument naming the value.
Precision parse_precision(std::string_view name);
const char* precision_name(Precision p);

// The element type layer `l` computes and stores its output in under precision `p`.
DType compute_dtype(const LayerSpec& l, Precision p);

// Whether backward starts from a scaled loss (dynamic loss scaling; f16 only).
bool needs_loss_scaling(Precision p);

// What the CPU this process runs on offers for reduced precision, as the CPU
// backend's kernels see it (oneDNN's effective ISA, which ONEDNN_MAX_CPU_ISA caps).
struct CpuIsa {
  std::string name;   // oneDNN's ISA, e.g. "avx512_core_bf16"
  bool bf16 = false;  // AVX512-BF16 (or AMX-BF16)
  bool amx = false;   // AMX tiles
  bool fp16 = false;  // AVX512-FP16 (the CPUID bit): Intel Sapphire Rapids and newer
};
CpuIsa probe_cpu_isa();

// Throws kUnsupported when the CPU backend cannot train at `p` on `isa`: the message
// names the missing instruction set and what works instead.
void check_cpu_precision(Precision p, const CpuIsa& isa);

// A warning for a precision that trains on `isa` but slower than f32 would, saying what
// is faster; empty when there is none. bf16 on a Sapphire Rapids or newer (AVX512-FP16)
// whose AMX this process cannot use (a VM or kernel that hides it, or ONEDNN_MAX_CPU_ISA):
// there a bf16 dot product does no more per cycle than an f32 FMA, so oneDNN's
// avx512_core_bf16 convolutions run at 0.5-0.7 of its f32 ones (Emerald Rapids, one core).
std::string cpu_precision_warning(Precision p, const CpuIsa& isa);

}  // namespace cohort::backend
