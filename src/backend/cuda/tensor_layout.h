// How the CUDA backend describes its values to cuDNN (pure arithmetic, tested on the
// CPU): every value is a 4-D tensor [N, C, H, W] (a [N, F] value is [N, F, 1, 1]) with
// strides for the plan's layout, and a window of pooling goes to cuDNN only where
// cuDNN's symmetric padding gives the spec's output size (floor mode, or a ceil mode
// that adds nothing); otherwise the backend's own kernel pools.
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

// The output size cuDNN's pooling gives for input `in`, window k, stride s, padding p
// on both sides (floor).
int64_t cudnn_pool_out(int64_t in, int k, int s, int p);

// Whether cuDNN's pooling computes the window `w` from input h×w to the spec's output
// oh×ow (the same windows in the same places).
bool cudnn_pool_fits(const Window& w, int64_t ih, int64_t iw, int64_t oh, int64_t ow);

}  // namespace cohort::backend
