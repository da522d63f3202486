// The extern "C" shim of the input pipeline (cohort/pipeline.h).
#include "cohort/pipeline.h"

#include <cstring>

#include "core/threads.h"
#include "data/pipeline.h"
#include "data/tools.h"
#include "handles.h"
#include "runtime/mpi_process.h"
#include "shim.h"
#include "train/instrument.h"

struct cohort_pipeline_t {
  std::shared_ptr<cohort::Runtime> runtime;  // keeps the runtime alive; may be null
  cohort::data::PipelineOptions options;
  std::shared_ptr<cohort::data::Source> source;
  std::unique_ptr<cohort::data::Pipeline> pipeline;
  std::unique_ptr<cohort::instrument::PipelineTrace> trace;  // instrument_dir only
  int64_t image_shape[4] = {0, 0, 0, 0};
  int64_t batch_shape[1] = {0};
};

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
  return data::pipeline_options(cfg, rank, size, budget);
}

void start(cohort_pipeline_t& p) { p.pipeline = std::make_unique<data::Pipeline>(p.options, p.source); }

void trace(cohort_pipeline_t& p, const cohort_config_t* config) {
  p.trace = instrument::PipelineTrace::make(config ? config->config : Config{}, p.options, p.source->size());
}

DLTensor view(const Tensor& t, int64_t* shape) {
  DLTensor d = t.dlpack_view();
  for (int i = 0; i < t.ndim(); ++i) shape[i] = t.dim(i);
  d.shape = shape;
  d.strides = nullptr;
  return d;
}

const cohort_pipeline_t& live(const cohort_pipeline_t* p) {
  need(p, "pipeline");
  if (!p->pipeline) fail(Code::kInvalidState, "the pipeline failed to restart; destroy it");
  return *p;
}

template <typename T>
void fill(T* out, const T& full) {
  std::memcpy(static_cast<void*>(out), &full, out->struct_size);
}

data::Report reporter(cohort_data_report_fn fn, void* user) {
  return [fn, user](const std::string& line) {
    if (fn) fn(line.c_str(), user);
  };
}

}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_pipeline_create(const cohort_runtime_t* runtime, const cohort_config_t* config,
                                                  cohort_pipeline_t** out) {
  return guard("cohort_pipeline_create", [&] {
    need(out, "out");
    *out = nullptr;
    auto p = std::make_unique<cohort_pipeline_t>();
    if (runtime) p->runtime = runtime->runtime;
    p->options = options_for(runtime, config);
    p->source = data::open_source(p->options.source);
    start(*p);
    trace(*p, config);
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
    auto p = std::make_unique<cohort_pipeline_t>();
    if (runtime) p->runtime = runtime->runtime;
    p->options = options_for(runtime, config);
    p->source = data::memory_source(*images, *labels, p->options.source);
    start(*p);
    trace(*p, config);
    *out = p.release();
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
    need(batch, "batch");
    capi::check_struct_size(batch->struct_size, sizeof(cohort_batch_t), "cohort_batch_t");
    cohort_pipeline_t& p = const_cast<cohort_pipeline_t&>(live(pipeline));
    const data::BatchView& b = p.pipeline->next();
    if (p.trace) p.trace->batch(b.epoch, b.step, b.valid);
    cohort_batch_t full{};
    full.struct_size = batch->struct_size;
    full.images = view(b.images, p.image_shape);
    p.batch_shape[0] = b.labels.dim(0);
    full.labels = view(b.labels, p.batch_shape);
    full.labels.shape = p.batch_shape;
    full.valid_mask = view(b.valid_mask, p.batch_shape);
    full.valid_mask.shape = p.batch_shape;
    full.valid = b.valid;
    full.epoch = b.epoch;
    full.step = b.step;
    fill(batch, full);
  });
}

COHORT_API cohort_status_t cohort_pipeline_seek(cohort_pipeline_t* pipeline, int64_t epoch, int64_t step) {
  return guard("cohort_pipeline_seek", [&] {
    need(pipeline, "pipeline");
    int64_t steps = pipeline->pipeline ? pipeline->pipeline->steps_per_epoch() : 0;
    require(epoch >= 0, "epoch ", epoch, " is negative");
    require(step >= 0 && step < steps, "step ", step, " is outside [0, ", steps, ")");
    pipeline->pipeline.reset();
    pipeline->options.start_epoch = epoch;
    pipeline->options.start_step = step;
    start(*pipeline);
  });
}

COHORT_API cohort_status_t cohort_pipeline_info(const cohort_pipeline_t* pipeline, cohort_pipeline_info_t* info) {
  return guard("cohort_pipeline_info", [&] {
    need(info, "info");
    capi::check_struct_size(info->struct_size, sizeof(cohort_pipeline_info_t), "cohort_pipeline_info_t");
    const data::Pipeline& p = *live(pipeline).pipeline;
    const auto& o = p.options();
    cohort_pipeline_info_t full{};
    full.struct_size = info->struct_size;
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
    fill(info, full);
  });
}

COHORT_API cohort_status_t cohort_pipeline_steps_per_epoch(const cohort_pipeline_t* pipeline, int64_t* steps) {
  return guard("cohort_pipeline_steps_per_epoch", [&] {
    need(steps, "steps");
    *steps = live(pipeline).pipeline->steps_per_epoch();
  });
}

COHORT_API cohort_status_t cohort_pipeline_stats(const cohort_pipeline_t* pipeline, cohort_pipeline_stats_t* stats) {
  return guard("cohort_pipeline_stats", [&] {
    need(stats, "stats");
    capi::check_struct_size(stats->struct_size, sizeof(cohort_pipeline_stats_t), "cohort_pipeline_stats_t");
    auto s = live(pipeline).pipeline->stats();
    cohort_pipeline_stats_t full{};
    full.struct_size = stats->struct_size;
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
    fill(stats, full);
  });
}

COHORT_API cohort_status_t cohort_pipeline_verdict(const cohort_pipeline_t* pipeline, char* buffer, size_t size,
                                                   size_t* needed) {
  return guard("cohort_pipeline_verdict", [&] {
    if (size > 0) need(buffer, "buffer");
    capi::copy_out(live(pipeline).pipeline->stats().verdict, buffer, size, needed);
  });
}

COHORT_API cohort_status_t cohort_data_pack(const cohort_config_t* config, const char* image_dir, const char* out_dir,
                                            int shards, cohort_data_report_fn report, void* user, int64_t* written) {
  return guard("cohort_data_pack", [&] {
    need(image_dir, "image_dir");
    need(out_dir, "out_dir");
    Config cfg = config ? config->config : Config{};
    auto r = data::pack_folder(cfg, image_dir, out_dir, shards, reporter(report, user));
    if (written) *written = r.written;
  });
}

COHORT_API cohort_status_t cohort_data_inspect(const cohort_config_t* config, const char* path, int64_t limit,
                                               cohort_data_report_fn report, void* user) {
  return guard("cohort_data_inspect", [&] {
    need(path, "path");
    need(report, "report");
    require(limit >= 0, "limit must not be negative");
    Config cfg = config ? config->config : Config{};
    data::inspect_source(cfg, path, limit, reporter(report, user));
  });
}

COHORT_API cohort_status_t cohort_data_verify(const cohort_config_t* config, const char* path,
                                              cohort_data_report_fn report, void* user, int64_t* broken) {
  return guard("cohort_data_verify", [&] {
    need(path, "path");
    Config cfg = config ? config->config : Config{};
    int64_t n = data::verify_source(cfg, path, reporter(report, user));
    if (broken) *broken = n;
  });
}

}  // extern "C"
