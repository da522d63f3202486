// The structs behind the opaque C handles, shared by the shim files. Child handles
// hold a shared_ptr to their runtime (directly or through their model), which keeps
// it alive; cohort_runtime_destroy() shuts the runtime down at once all the same.
#pragma once

#include <memory>
#include <vector>

#include "core/config.h"
#include "data/pipeline.h"
#include "runtime/runtime.h"
#include "train/instrument.h"
#include "train/model.h"

struct cohort_config_t {
  cohort::Config config;
};

struct cohort_runtime_t {
  std::shared_ptr<cohort::Runtime> runtime;
};

struct cohort_model_t {
  std::shared_ptr<cohort::train::Model> model;
  std::vector<DLTensor> views;  // value, grad per parameter (after materialize)
};

struct cohort_pipeline_t {
  std::shared_ptr<cohort::Runtime> runtime;  // keeps the runtime alive; may be null
  std::unique_ptr<cohort::data::SeekablePipeline> pipeline;
  std::unique_ptr<cohort::instrument::PipelineTrace> trace;  // instrument_dir only
  int64_t image_shape[4] = {0, 0, 0, 0};
  int64_t batch_shape[1] = {0};
};

namespace cohort::capi {
// The running pipeline of a handle; throws kInvalidArgument for NULL and kInvalidState
// when a restart (cohort_pipeline_seek) failed.
data::Pipeline& pipeline_of(const cohort_pipeline_t* p);
}  // namespace cohort::capi
