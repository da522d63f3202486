// A tensor with a name: a parameter, a gradient or a piece of optimizer state, as
// optimizers, checkpoints and broadcasts exchange them.
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace cohort {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// A parameter and its gradient, updated together by an optimizer.
struct ParamGrad {
  std::string name;
  Tensor param;
  Tensor grad;
};

// A contiguous host copy of a tensor on any device (same shape and dtype), complete on
// return.
Tensor clone_host(const Tensor& t);

}  // namespace cohort
