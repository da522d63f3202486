#include "backend/cuda/tensor_layout.h"

#include <limits>

#include "core/status.h"

namespace cohort::backend {

Desc4 describe4(int64_t batch, const Shape& sample, Layout layout) {
  require(sample.size() == 1 || sample.size() == 3, "a CUDA value is {C, H, W} or {F} per sample, got ",
          shape_string(sample));
  const int64_t c = sample[0], h = sample.size() == 3 ? sample[1] : 1, w = sample.size() == 3 ? sample[2] : 1;
  const int64_t total = batch * c * h * w;
  if (batch <= 0 || total > std::numeric_limits<int>::max())
    fail(Code::kInvalidArgument, "a batch of ", batch, " samples of ", shape_string(sample),
         " does not fit cuDNN's 32-bit tensor sizes; use a smaller batch");
  Desc4 d;
  d.dims = {static_cast<int>(batch), static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)};
  if (layout == Layout::kNHWC && sample.size() == 3)
    d.strides = {static_cast<int>(h * w * c), 1, static_cast<int>(w * c), static_cast<int>(c)};
  else
    d.strides = {static_cast<int>(c * h * w), static_cast<int>(h * w), static_cast<int>(w), 1};
  return d;
}

}  // namespace cohort::backend
