#include "backend/precision.h"

#include "core/status.h"

namespace cohort::backend {

Precision parse_precision(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return Precision::kF32;
  if (name == "bf16" || name == "bfloat16") return Precision::kBF16;
  if (name == "f16" || name == "fp16" || name == "float16") return Precision::kF16;
  fail(Code::kInvalidArgument, "precision '", name, "' is not one of f32|bf16|f16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kF32:
      return "f32";
    case Precision::kBF16:
      return "bf16";
    case Precision::kF16:
      return "f16";
  }
  return "?";
}

DType compute_dtype(const LayerSpec& l, Precision p) {
  if (p == Precision::kF32) return DType::kF32;
  switch (l.kind) {
    // The layers that stay f32 at every precision: the input batch (cast by the layers
    // that read it) and softmax with the loss. Batch norm computes in the reduced type
    // but keeps its statistics, scale and shift in f32 (every backend's kernels do).
    case LayerKind::kInput:
    case LayerKind::kSoftmaxXent:
      return DType::kF32;
    default:
      return p == Precision::kBF16 ? DType::kBF16 : DType::kF16;
  }
}

bool needs_loss_scaling(Precision p) { return p == Precision::kF16; }

void check_cpu_precision(Precision p, const CpuIsa& isa) {
  switch (p) {
    case Precision::kF32:
      return;
    case Precision::kBF16:
      if (isa.bf16) return;
      fail(Code::kUnsupported, "precision=bf16 needs a CPU with the AVX512-BF16 instructions (or AMX-BF16); this ",
           "CPU's instruction set is ", isa.name,
           ", without them. Use --precision=f32 here, or run bf16 on a CPU that has AVX512-BF16 (AMD Zen 4, Intel ",
           "Cooper Lake, Sapphire Rapids and newer)");
    case Precision::kF16:
      fail(Code::kUnsupported, "precision=f16 cannot train on the CPU backend: oneDNN has no f16 training kernels ",
           "for it (instruction set ", isa.name, "). Use --precision=bf16 on a CPU with AVX512-BF16",
           isa.bf16 ? " (this one has it)" : "", ", --precision=f32, or f16 on a CUDA GPU");
  }
}

std::string cpu_precision_warning(Precision p, const CpuIsa& isa) {
  if (p != Precision::kBF16 || !isa.bf16 || isa.amx || !isa.fp16) return {};
  return cat("precision=bf16 trains slower than f32 on this CPU: it has AVX512-FP16 (Intel Sapphire Rapids or newer) ",
             "but this process cannot use its AMX tiles (oneDNN's instruction set is ", isa.name,
             "; a VM or the kernel may hide them), and without AMX a bf16 dot product does no more per cycle ",
             "than an f32 FMA, so bf16 convolutions run at 0.5-0.7 of the speed of f32 ones. --precision=f32 is ",
             "faster here");
}

}  // namespace cohort::backend
