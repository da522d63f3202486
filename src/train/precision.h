// Which arithmetic precisions can train where: the one place that decides it.
#pragma once

#include "core/config.h"

namespace cohort::train {

// Throws kUnsupported, saying what would work, unless the `precision` option of
// `config` can train on this build and machine.
void check_precision(const Config& config);

}  // namespace cohort::train
