// A model and its input pipeline: the options of a pipeline made for a model (its
// image size, channels and classes come from the model, and an option that says
// otherwise is an error), the check that a pipeline fits a model, and evaluation of a
// model over a pipeline.
#pragma once

#include <cstdint>

#include "core/config.h"
#include "data/pipeline.h"
#include "train/evaluation.h"
#include "train/model.h"

namespace cohort::train {

// Pipeline options from `config` (as data::pipeline_options with the model's runtime
// for rank and thread budget, sharded over the ranks that compute: all of them but
// dedicated parameter servers), with image_size, synthetic_channels and num_classes
// taken from the model. Throws kInvalidArgument when `config` sets one of them to
// another value, when the model does not take square images, or on a dedicated
// parameter server.
data::PipelineOptions pipeline_options_for(const Model& model, const Config& config);

// Throws kInvalidArgument naming the dataset and the model when the pipeline's images
// have another number of channels than the model takes, or its labels more classes.
void check_pipeline_fits(const Model& model, const data::Pipeline& pipeline);

// Collective: inference over `max_steps` batches of `pipeline` (0: one epoch), the
// counts then summed over ranks. Every rank gets the same result. A rank without data
// (a dedicated parameter server) passes null and adds nothing.
EvalResult evaluate(Model& model, data::Pipeline* pipeline, int64_t max_steps);

}  // namespace cohort::train
