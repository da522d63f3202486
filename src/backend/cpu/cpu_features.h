// What the processor offers the CPU backend's own loops, probed once per process.
// (oneDNN's kernels go by its effective ISA instead: probe_cpu_isa in backend/precision.h.)
#pragma once

namespace cohort::backend::cpu {

// AVX-512 F, BW and VL: what the backend's AVX-512 loops (dropout masks, max pooling) use.
bool cpu_has_avx512();

// CPUID leaf 7's AVX512-FP16 bit (EDX 23), which oneDNN 2.x's ISA does not report.
bool cpu_has_avx512_fp16();

}  // namespace cohort::backend::cpu
