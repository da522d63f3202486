// The extern "C" shim of the input pipeline (cohort/pipeline.h).
#include "cohort/pipeline.h"

#include <cstring>

#include "core/threads.h"
#include "data/pipeline.h"
#include "handles.h"
#include "runtime/mpi_process.h"
#include "shim.h"
#include "structs.h"
#include "train/model_data.h"
#include "train/instrument.h"

using namespace cohort;
using capi::guard;
using capi::need;

namespace {

data::PipelineOptions options_for(const cohort_runtime_t* rt, const cohort_config_t* config) {
  Config cfg = config ? config->config : Config{};
  int rank = 0, size = 1, budget = available_cores();
  if (rt) {
    mpi_process::check_not_poisoned();
    rank = rt->runtime->rank();
    size = rt->runtime->size();
    budget = rt->runtime->thread_budget();
  }
  data::PipelineOptions o = data::pipeline_options(cfg, rank, size, budget);
  // A runtime that computes on a GPU: batches in pinned memory, ready for the copy.
  if (rt && !rt->runtime->device().is_host()) o.batch_memory = rt->runtime->memory().pinned();
  return o;
}

// A handle on a pipeline started on `source` (nullptr: the one the options name), with
// the record of what it delivers when the option instrument_dir is set.
std::unique_ptr<cohort_pipeline_t> make_handle(std::shared_ptr<Runtime> runtime, data::PipelineOptions options,
                                               std::shared_ptr<data::Source> source, const Config& config) {
  auto p = std::make_unique<cohort_pipeline_t>();
  p->runtime = std::move(runtime);
  p->pipeline = std::make_unique<data::SeekablePipeline>(std::move(options), std::move(source));
  p->trace = instrument::PipelineTrace::make(config, p->pipeline->options(), p->pipeline->source().size());
  return p;
}

DLTensor view(const Tensor& t, int64_t* shape) {
  DLTensor d = t.dlpack_view();
  for (int i = 0; i < t.ndim(); ++i) shape[i] = t.dim(i);
  d.shape = shape;
  d.strides = nullptr;
  return d;
}

}  // namespace

namespace cohort::capi {
data::Pipeline& pipeline_of(const cohort_pipeline_t* p) { return need(p, "pipeline")->pipeline->pipeline(); }
}  // namespace cohort::capi

extern "C" {

COHORT_API cohort_status_t cohort_pipeline_create(const cohort_runtime_t* runtime, const cohort_config_t* config,
                                                  cohort_pipeline_t** out) {
  return guard("cohort_pipeline_create", [&] {
    need(out, "out");
    *out = nullptr;
    const Config cfg = config ? config->config : Config{};
    *out = make_handle(runtime ? runtime->runtime : nullptr, options_for(runtime, config), nullptr, cfg).release();
  });
}

COHORT_API cohort_status_t cohort_pipeline_create_for_model(const struct cohort_model_t* model,
                                                            const cohort_config_t* config, cohort_pipeline_t** out) {
  return guard("cohort_pipeline_create_for_model", [&] {
    need(out, "out");
    *out = nullptr;
    const train::Model& m = *need(model, "model")->model;
    mpi_process::check_not_poisoned();
    const Config& cfg = config ? config->config : m.runtime().config();
    auto p = make_handle(m.runtime_ptr(), train::pipeline_options_for(m, cfg), nullptr, cfg);
    train::check_pipeline_fits(m, p->pipeline->pipeline());
    *out = p.release();
  });
}

COHORT_API cohort_status_t cohort_pipeline_create_from_memory(const cohort_runtime_t* runtime,
                                                              const cohort_config_t* config, const DLTensor* images,
                                                              const DLTensor* labels, cohort_pipeline_t** out) {
  return guard("cohort_pipeline_create_from_memory", [&] {
    need(out, "out");
    *out = nullptr;
    need(images, "images");
    need(labels, "labels");
    need(images->data, "images->data");
    need(labels->data, "labels->data");
    data::PipelineOptions options = options_for(runtime, config);
    auto source = data::memory_source(*images, *labels, options.source);
    const Config cfg = config ? config->config : Config{};
    *out = make_handle(runtime ? runtime->runtime : nullptr, std::move(options), std::move(source), cfg).release();
  });
}

COHORT_API void cohort_pipeline_destroy(cohort_pipeline_t* pipeline) {
  try {
    delete pipeline;
  } catch (...) {
    // Destruction never throws across the boundary.
  }
}

COHORT_API cohort_status_t cohort_pipeline_next(cohort_pipeline_t* pipeline, cohort_batch_t* batch) {
  return guard("cohort_pipeline_next", [&] {
    // Checked before the batch is taken, so a bad struct consumes nothing.
    capi::check_struct_size<cohort_batch_t>(need(batch, "batch")->struct_size, "batch");
    const data::BatchView& b = capi::pipeline_of(pipeline).next();
    if (pipeline->trace) pipeline->trace->batch(b.epoch, b.step, b.valid);
    cohort_batch_t full{};
    full.images = view(b.images, pipeline->image_shape);
    pipeline->batch_shape[0] = b.labels.dim(0);
    full.labels = view(b.labels, pipeline->batch_shape);
    full.valid_mask = view(b.valid_mask, pipeline->batch_shape);
    full.valid = b.valid;
    full.epoch = b.epoch;
    full.step = b.step;
    capi::write_out(batch, full, "batch");
  });
}

COHORT_API cohort_status_t cohort_pipeline_seek(cohort_pipeline_t* pipeline, int64_t epoch, int64_t step) {
  return guard("cohort_pipeline_seek", [&] { need(pipeline, "pipeline")->pipeline->seek(epoch, step); });
}

COHORT_API cohort_status_t cohort_pipeline_position(const cohort_pipeline_t* pipeline, int64_t* epoch, int64_t* step) {
  return guard("cohort_pipeline_position", [&] {
    const data::PipelinePosition p = capi::pipeline_of(pipeline).position();
    if (epoch) *epoch = p.epoch;
    if (step) *step = p.step;
  });
}

COHORT_API cohort_status_t cohort_pipeline_info(const cohort_pipeline_t* pipeline, cohort_pipeline_info_t* info) {
  return guard("cohort_pipeline_info", [&] {
    capi::check_struct_size<cohort_pipeline_info_t>(need(info, "info")->struct_size, "info");
    const data::Pipeline& p = capi::pipeline_of(pipeline);
    const auto& o = p.options();
    cohort_pipeline_info_t full{};
    full.dataset_size = p.dataset_size();
    full.steps_per_epoch = p.steps_per_epoch();
    full.samples_per_epoch = p.valid_per_epoch();
    full.batch_size = o.batch_size;
    full.num_classes = p.source().classes();
    full.channels = p.channels();
    full.height = o.augment.out_h;
    full.width = o.augment.out_w;
    auto s = p.stats();
    full.reader_threads = s.reader_threads;
    full.decode_threads = s.decode_threads;
    full.prefetch_depth = s.prefetch_depth;
    capi::write_out(info, full, "info");
  });
}

COHORT_API cohort_status_t cohort_pipeline_steps_per_epoch(const cohort_pipeline_t* pipeline, int64_t* steps) {
  return guard("cohort_pipeline_steps_per_epoch", [&] {
    need(steps, "steps");
    *steps = capi::pipeline_of(pipeline).steps_per_epoch();
  });
}

COHORT_API cohort_status_t cohort_pipeline_stats(const cohort_pipeline_t* pipeline, cohort_pipeline_stats_t* stats) {
  return guard("cohort_pipeline_stats", [&] {
    capi::check_struct_size<cohort_pipeline_stats_t>(need(stats, "stats")->struct_size, "stats");
    auto s = capi::pipeline_of(pipeline).stats();
    cohort_pipeline_stats_t full{};
    full.batches = s.batches;
    full.images = s.images;
    full.decoded = s.decoded;
    full.errors = s.errors;
    full.padded = s.padded;
    full.read_busy_s = s.read_busy_s;
    full.decode_busy_s = s.decode_busy_s;
    full.wait_s = s.wait_s;
    full.elapsed_s = s.elapsed_s;
    full.images_per_sec = s.images_per_sec;
    full.wait_fraction = s.wait_fraction;
    full.mean_ready_batches = s.mean_ready_batches;
    full.mean_decode_queue = s.mean_decode_queue;
    full.skipped = s.skipped;
    full.read_cpu_s = s.read_cpu_s;
    full.decode_cpu_s = s.decode_cpu_s;
    full.augment_cpu_s = s.augment_cpu_s;
    full.assemble_cpu_s = s.assemble_cpu_s;
    full.bytes_read = s.bytes_read;
    full.limiting_stage = "";
    for (const char* stage : {"read", "decode", "augment", "assemble"})
      if (s.limiting_stage == stage) full.limiting_stage = stage;
    capi::write_out(stats, full, "stats");
  });
}

COHORT_API cohort_status_t cohort_pipeline_verdict(const cohort_pipeline_t* pipeline, char* buffer, size_t size,
                                                   size_t* needed) {
  return guard("cohort_pipeline_verdict", [&] {
    if (size > 0) need(buffer, "buffer");
    capi::copy_out(capi::pipeline_of(pipeline).stats().verdict, buffer, size, needed);
  });
}

}  // extern "C"
