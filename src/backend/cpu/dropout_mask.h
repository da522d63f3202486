// Dropout on the CPU: the keep mask of kernels::dropout_factor's draws, generated with
// AVX-512 where the CPU has it (16 Philox counters at once), then applied to the data
// in forward and to the gradient in backward from the stored mask.
#pragma once

#include <cstdint>

namespace cohort::backend {

// keep[i] = 1 when element offset + i of (stream, seed) is kept at drop probability p,
// 0 when dropped: exactly kernels::dropout_factor(offset + i, ...) != 0.
void dropout_mask(uint8_t* keep, int64_t n, uint64_t offset, uint64_t stream, uint64_t seed, float p);

// y[i] = keep[i] ? x[i] * scale : 0, for f32 and for bf16 (as uint16_t bits).
void dropout_apply_mask(const float* x, float* y, const uint8_t* keep, int64_t n, float scale);
void dropout_apply_mask(const uint16_t* x, uint16_t* y, const uint8_t* keep, int64_t n, float scale);

}  // namespace cohort::backend
