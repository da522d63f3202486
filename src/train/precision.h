// Which arithmetic precisions can train where: the one place that decides it.
#pragma once

#include "core/config.h"
#include "tensor/device.h"

namespace cohort::train {

// Throws kUnsupported, saying what would work, unless the `precision` option of
// `config` can train on `device` (its instruction set on the CPU; on a CUDA GPU f32,
// f16 and bf16 all train, the backend checking bf16's compute capability).
void check_precision(const Config& config, Device device);

}  // namespace cohort::train
