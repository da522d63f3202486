// How the CUDA backend describes its values to cuDNN (pure arithmetic, tested on the
// CPU): every value is a 4-D tensor [N, C, H, W] (a [N, F] value is [N, F, 1, 1]) with
// strides for its layout.
#pragma once

#include <array>
#include <cstdint>

#include "backend/net_spec.h"

namespace cohort::backend {

struct Desc4 {
  std::array<int, 4> dims{};     // n, c, h, w
  std::array<int, 4> strides{};  // in elements
};

// The 4-D description of a batch value of per-sample shape `sample` ({C, H, W} or
// {F}) stored in `layout`. Throws kInvalidArgument when a size exceeds what cuDNN's
// int dimensions hold.
Desc4 describe4(int64_t batch, const Shape& sample, Layout layout);

}  // namespace cohort::backend
