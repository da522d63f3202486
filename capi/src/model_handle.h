// The struct behind cohort_model_t, for the shim files that work on models (the
// training step and the optimizer wrap its Graph).
#pragma once

#include <memory>

#include "graph/graph.h"
#include "runtime/runtime.h"

struct cohort_model_t {
  std::shared_ptr<cohort::Runtime> runtime;
  std::unique_ptr<cohort::Graph> graph;
  cohort::Layout layout = cohort::Layout::kNCHW;
  uint64_t seed = 0;
  void (*grad_ready)(void*, size_t) = nullptr;
  void* grad_ready_user = nullptr;
  std::vector<DLTensor> views;  // value, grad per parameter (after materialize)
};
