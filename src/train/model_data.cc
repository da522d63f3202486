#include "train/model_data.h"

#include <string>
#include <vector>

#include "core/logging.h"
#include "core/status.h"
#include "train/engine_collectives.h"
#include "train/variable_update.h"

namespace cohort::train {
namespace {

// Gives `key` the model's value unless the configuration already says the same.
void take_from_model(Config& config, const Model& model, const char* key, int64_t value, const char* what) {
  if (config.is_explicit(key) && config.get_int(key) != value)
    fail(Code::kInvalidArgument, "the option ", key, "=", config.get_int(key), " disagrees with model '", model.name(),
         "', which takes ", what, " ", value, "; unset the option or build the model with it");
  config.set(key, std::to_string(value));
}

std::string dataset_name(const data::Pipeline& pipeline) {
  const std::string& path = pipeline.options().source.path;
  return path.empty() ? std::string("synthetic data") : "the data in '" + path + "'";
}

}  // namespace

data::PipelineOptions pipeline_options_for(const Model& model, const Config& config) {
  const IoShape io = model.io_shape();
  require(model.graph().shape(0).size() == 3, "model '", model.name(),
          "' takes feature vectors, not images: an input pipeline cannot feed it");
  require(io.height == io.width, "model '", model.name(), "' takes ", io.height, "x", io.width,
          " images, but an input pipeline makes square ones");
  Config c = config;
  take_from_model(c, model, "image_size", io.height, "images of size");
  take_from_model(c, model, "synthetic_channels", io.channels, "channels:");
  take_from_model(c, model, "num_classes", io.classes, "classes:");
  // The data is shared by the ranks that compute: a dedicated parameter server reads none.
  const Runtime& rt = model.runtime();
  const Roles roles = Roles::from_config(c, rt.size());
  require(roles.is_worker(rt.rank()), "rank ", rt.rank(),
          " is a dedicated parameter server (variable_update=", variable_update_name(roles.mode),
          ", ps_dedicated=true): it reads no data; open pipelines on the ranks where "
          "cohort_optimizer_info() says worker = 1");
  data::PipelineOptions o = data::pipeline_options(c, rt.rank(), roles.workers(), rt.thread_budget());
  if (!model.device().is_host()) {
    // Batches for a device: pinned host memory, and (device_batches) the copy to the
    // device overlapped with the step before.
    Runtime& r = model.runtime();
    auto pinned = r.memory().pinned();
    o.batch_memory = pinned;
    if (r.rank() == 0) COHORT_LOG_INFO("input batches in ", pinned->describe());
    if (c.get_bool("device_batches")) {
      o.feed_device = model.device();
      o.device_memory = r.memory().on(model.device());
      o.feed_stream = model.stream();
    }
  }
  return o;
}

void check_pipeline_fits(const Model& model, const data::Pipeline& pipeline) {
  const IoShape io = model.io_shape();
  require(pipeline.channels() == io.channels, dataset_name(pipeline), " has ", pipeline.channels(),
          "-channel images, but model '", model.name(), "' takes ", io.channels, " channels");
  const int64_t classes = pipeline.source().classes();
  require(classes <= io.classes, dataset_name(pipeline), " has ", classes, " classes, but model '", model.name(),
          "' has ", io.classes, " outputs; build the model with --num_classes=", classes);
}

EvalResult evaluate(Model& model, data::Pipeline* pipeline, int64_t max_steps) {
  model.runtime().check_open("evaluating");
  require(max_steps >= 0, "max_steps must be >= 0, got ", max_steps);
  const int64_t steps = !pipeline ? 0 : max_steps > 0 ? max_steps : pipeline->steps_per_epoch();
  const Shape& out_shape = model.graph().shape(model.graph().output_layer());
  require(out_shape.size() == 1, "evaluation needs a model whose output is a vector of class scores, got ",
          shape_string(out_shape));
  const int64_t classes = out_shape[0];
  EvalAccumulator acc;
  Tensor logits;  // on the model's device: the metrics are reduced there
  for (int64_t s = 0; s < steps; ++s) {
    const data::BatchView& b = pipeline->next();
    const int64_t n = b.images.dim(0);
    if (logits.ndim() != 2 || logits.dim(0) != n)
      logits = model.device().is_host() ? Tensor::empty({n, classes}, DType::kF32)
                                        : Tensor::empty({n, classes}, DType::kF32,
                                                        *model.runtime().memory().on(model.device()), model.stream());
    model.forward(b.images, logits);
    acc.add_batch(logits, b.labels, b.valid, model.stream());
  }
  EngineCollectives comm(model.runtime().engine(), "eval/");
  return acc.global_result(comm);
}

}  // namespace cohort::train
