// The training shim: the distributed optimizer bound to a model, the training step,
// evaluation, checkpoints, and the run metrics.
#include "cohort/train.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "backend/precision.h"
#include "core/config.h"
#include "core/strings.h"
#include "handles.h"
#include "model_handle.h"
#include "optim/distributed_optimizer.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "runtime/mpi_process.h"
#include "shim.h"
#include "train/checkpoint.h"
#include "train/engine_collectives.h"
#include "train/evaluation.h"
#include "train/metrics.h"
#include "train/run_summary.h"

using namespace cohort;
using capi::guard;
using capi::need;

struct cohort_optimizer_t {
  cohort_model_t* model = nullptr;
  Config config;
  int64_t global_batch = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<EngineCollectives> comm;
  std::unique_ptr<DistributedOptimizer> dist;
  std::optional<LrSchedule> schedule;

  const LrSchedule& lr_schedule() {
    if (!schedule) schedule.emplace(LrScheduleOptions::from_config(config, global_batch, steps_per_epoch, total_steps));
    return *schedule;
  }
  // Parameters and batch-norm statistics, as checkpoints name them.
  std::vector<NamedTensor> model_tensors() const {
    std::vector<NamedTensor> out;
    for (const Parameter& p : model->graph->params()) out.push_back({p.name, p.value});
    for (const Parameter& s : model->graph->states()) out.push_back({s.name, s.value});
    return out;
  }
};

struct cohort_metrics_t {
  StepMetrics metrics;
};

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs a public C function from inside the shim and turns its status into an Error.
void call(cohort_status_t s) {
  if (s != COHORT_OK) throw Error(static_cast<Code>(s), cohort_last_error());
}

void grad_ready_hook(void* user, size_t index) { static_cast<cohort_optimizer_t*>(user)->dist->gradient_ready(index); }

cohort_optimizer_t& live(cohort_optimizer_t* o) {
  need(o, "optimizer");
  mpi_process::check_not_poisoned();
  return *o;
}

template <typename T>
void fill_out(T* out, const T& full, const char* what) {
  need(out, what);
  capi::check_struct_size(out->struct_size, sizeof(T), what);
  const size_t n = out->struct_size;
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&full) + sizeof(size_t),
              n - sizeof(size_t));
}

void check_precision(const Config& cfg) {
  backend::check_cpu_precision(backend::parse_precision(cfg.get_string("precision")), backend::probe_cpu_isa());
}

// A view of the first `rows` rows of a batch tensor.
struct RowView {
  DLTensor t;
  int64_t shape[8];
  RowView(const DLTensor& src, int64_t rows) : t(src) {
    require(src.ndim >= 1 && src.ndim <= 8, "batch tensor has ", src.ndim, " dimensions");
    std::memcpy(shape, src.shape, sizeof(int64_t) * static_cast<size_t>(src.ndim));
    shape[0] = rows;
    t.shape = shape;
  }
};

}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_model_io_shape(const cohort_model_t* model, int64_t* channels, int64_t* height,
                                                 int64_t* width, int64_t* num_classes) {
  return guard("cohort_model_io_shape", [&] {
    need(model, "model");
    const Shape& in = model->graph->shape(0);
    if (channels) *channels = in.empty() ? 0 : in[0];
    if (height) *height = in.size() == 3 ? in[1] : 1;
    if (width) *width = in.size() == 3 ? in[2] : 1;
    if (num_classes) {
      const Shape& out = model->graph->shape(model->graph->output_layer());
      *num_classes = out.empty() ? 0 : out[0];
    }
  });
}

COHORT_API cohort_status_t cohort_optimizer_create(cohort_model_t* model, const cohort_config_t* config,
                                                   cohort_optimizer_t** out) {
  return guard("cohort_optimizer_create", [&] {
    need(out, "out");
    *out = nullptr;
    need(model, "model");
    mpi_process::check_not_poisoned();
    auto o = std::make_unique<cohort_optimizer_t>();
    o->model = model;
    o->config = config ? config->config : model->runtime->config();
    check_precision(o->config);
    const int64_t passes = o->config.get_int("backward_passes_per_step");
    o->global_batch = o->config.get_int("batch_size") * model->runtime->size() * passes;
    o->optimizer = std::make_unique<Optimizer>(OptimizerOptions::from_config(o->config));
    // Two optimizers on one runtime must not share collective names.
    const int index = model->runtime->next_optimizer_index();
    o->comm = std::make_unique<EngineCollectives>(model->runtime->engine(),
                                                  index == 0 ? std::string("grad/") : cat("grad", index, "/"));
    if (!model->graph->materialized()) call(cohort_model_materialize(model));
    std::vector<ParamGrad> params;
    for (const Parameter& p : model->graph->params()) params.push_back({p.name, p.value, p.grad});
    o->dist = std::make_unique<DistributedOptimizer>(*o->optimizer, *o->comm, std::move(params),
                                                     DistributedOptions::from_config(o->config));
    // Validate the schedule's options now when the run's length is not needed for it.
    try {
      o->lr_schedule();
    } catch (const Error& e) {
      if (o->config.get_float("warmup_epochs") == 0 && o->config.get_string("lr_schedule") == "constant") throw;
      o->schedule.reset();
    }
    model->grad_ready = grad_ready_hook;
    model->grad_ready_user = o.get();
    *out = o.release();
  });
}

COHORT_API void cohort_optimizer_destroy(cohort_optimizer_t* optimizer) {
  if (!optimizer) return;
  try {
    if (optimizer->model && optimizer->model->grad_ready_user == optimizer) {
      optimizer->model->grad_ready = nullptr;
      optimizer->model->grad_ready_user = nullptr;
    }
    delete optimizer;
  } catch (...) {
  }
}

COHORT_API cohort_status_t cohort_optimizer_set_run_length(cohort_optimizer_t* optimizer, int64_t steps_per_epoch,
                                                           int64_t total_steps) {
  return guard("cohort_optimizer_set_run_length", [&] {
    cohort_optimizer_t& o = live(optimizer);
    require(steps_per_epoch >= 0 && total_steps >= 0, "steps_per_epoch (", steps_per_epoch, ") and total_steps (",
            total_steps, ") must be >= 0");
    o.steps_per_epoch = steps_per_epoch;
    o.total_steps = total_steps;
    o.schedule.reset();
    o.lr_schedule();
  });
}

COHORT_API cohort_status_t cohort_optimizer_state(const cohort_optimizer_t* optimizer, double* lr, int64_t* steps) {
  return guard("cohort_optimizer_state", [&] {
    auto& o = live(const_cast<cohort_optimizer_t*>(optimizer));
    if (lr) *lr = o.lr_schedule().lr_at(o.optimizer->steps());
    if (steps) *steps = o.optimizer->steps();
  });
}

COHORT_API cohort_status_t cohort_optimizer_broadcast(cohort_optimizer_t* optimizer, int root) {
  return guard("cohort_optimizer_broadcast", [&] {
    cohort_optimizer_t& o = live(optimizer);
    o.dist->broadcast_parameters(root);
    for (const Parameter& s : o.model->graph->states()) o.comm->broadcast("state/" + s.name, s.value, root);
  });
}

COHORT_API cohort_status_t cohort_optimizer_check_consistency(cohort_optimizer_t* optimizer) {
  return guard("cohort_optimizer_check_consistency", [&] { live(optimizer).dist->check_consistency(); });
}

COHORT_API cohort_status_t cohort_model_train_step(cohort_model_t* model, cohort_optimizer_t* optimizer,
                                                   const cohort_batch_t* batch, cohort_train_stats_t* stats) {
  return guard("cohort_model_train_step", [&] {
    const auto start = Clock::now();
    cohort_optimizer_t& o = live(optimizer);
    need(model, "model");
    need(batch, "batch");
    require(o.model == model, "the optimizer was created for another model");
    if (stats) capi::check_struct_size(stats->struct_size, sizeof(cohort_train_stats_t), "stats");
    const int64_t rows = batch->images.ndim >= 1 ? batch->images.shape[0] : 0;
    require(batch->valid >= 0 && batch->valid <= rows, "batch->valid is ", batch->valid, " but the batch has ", rows,
            " rows");
    const double lr = o.lr_schedule().lr_at(o.optimizer->steps());
    float loss = 0;
    model->graph->set_step(
        static_cast<uint64_t>(o.optimizer->steps() * o.dist->options().backward_passes_per_step + o.dist->pass()));
    if (batch->valid > 0) {
      RowView images(batch->images, batch->valid), labels(batch->labels, batch->valid);
      call(cohort_model_forward_backward(model, &images.t, &labels.t, &loss));
    } else {
      for (const Parameter& p : model->graph->params()) std::memset(p.grad.data(), 0, p.grad.nbytes());
    }
    const double compute_s = since(start);
    o.comm->take_wait_seconds();
    const auto update_start = Clock::now();
    const bool last_pass = o.dist->step(lr);
    const double wait_s = o.comm->take_wait_seconds();
    const double update_s = since(update_start) - wait_s;
    model->graph->record_step(since(start), update_s);
    if (stats) {
      cohort_train_stats_t full{};
      full.loss = loss;
      full.lr = lr;
      full.images = rows;
      full.valid = batch->valid;
      full.step = o.optimizer->steps();
      full.updated = last_pass && !o.dist->last_step_skipped() ? 1 : 0;
      full.compute_s = compute_s;
      full.comm_wait_s = wait_s;
      full.update_s = update_s;
      full.total_s = since(start);
      fill_out(stats, full, "stats");
    }
  });
}

COHORT_API cohort_status_t cohort_model_evaluate(cohort_model_t* model, cohort_pipeline_t* pipeline, int64_t max_steps,
                                                 cohort_eval_result_t* result) {
  return guard("cohort_model_evaluate", [&] {
    need(model, "model");
    need(pipeline, "pipeline");
    need(result, "result");
    capi::check_struct_size(result->struct_size, sizeof(cohort_eval_result_t), "result");
    mpi_process::check_not_poisoned();
    require(max_steps >= 0, "max_steps must be >= 0, got ", max_steps);
    int64_t steps = max_steps;
    if (steps == 0) call(cohort_pipeline_steps_per_epoch(pipeline, &steps));
    const Shape& out_shape = model->graph->shape(model->graph->output_layer());
    require(out_shape.size() == 1, "evaluation needs a model whose output is a vector of class scores, got ",
            shape_string(out_shape));
    const int64_t classes = out_shape[0];
    EvalAccumulator acc;
    std::vector<float> logits;
    for (int64_t s = 0; s < steps; ++s) {
      cohort_batch_t b{};
      b.struct_size = sizeof b;
      call(cohort_pipeline_next(pipeline, &b));
      const int64_t n = b.images.shape[0];
      logits.resize(static_cast<size_t>(n * classes));
      int64_t oshape[2] = {n, classes};
      DLTensor out{};
      out.data = logits.data();
      out.device = {kDLCPU, 0};
      out.ndim = 2;
      out.dtype = {kDLFloat, 32, 1};
      out.shape = oshape;
      call(cohort_model_forward(model, &b.images, &out));
      Tensor lt = Tensor::wrap(logits.data(), {n, classes}, DType::kF32);
      Tensor labels = Tensor::from_dlpack(b.labels);
      acc.add_batch(lt, labels, b.valid);
    }
    EngineCollectives comm(model->runtime->engine(), "eval/");
    const EvalResult r = acc.global_result(comm);
    cohort_eval_result_t full{};
    full.samples = r.samples;
    full.top1 = r.top1;
    full.top5 = r.top5;
    full.loss = r.loss;
    fill_out(result, full, "result");
  });
}

COHORT_API cohort_status_t cohort_optimizer_save_checkpoint(cohort_optimizer_t* optimizer, const char* dir,
                                                            const cohort_checkpoint_info_t* info) {
  return guard("cohort_optimizer_save_checkpoint", [&] {
    cohort_optimizer_t& o = live(optimizer);
    need(dir, "dir");
    need(info, "info");
    capi::check_struct_size(info->struct_size, sizeof(cohort_checkpoint_info_t), "info");
    require(*dir != '\0', "dir is empty");
    if (o.model->runtime->rank() != 0) return;
    Checkpoint ck;
    ck.model = o.config.get_string("model");
    ck.epoch = info->epoch;
    ck.step = o.optimizer->steps();
    ck.pipeline_epoch = info->pipeline_epoch;
    ck.pipeline_step = info->pipeline_step;
    ck.seed = static_cast<uint64_t>(o.config.get_int("seed"));
    ck.metadata["ranks"] = std::to_string(o.model->runtime->size());
    for (const NamedTensor& t : o.model_tensors()) ck.params.push_back({t.name, clone_host(t.tensor)});
    store_optimizer_state(ck, *o.optimizer);
    CheckpointDir(dir, static_cast<int>(o.config.get_int("keep_checkpoints"))).save(ck);
  });
}

COHORT_API cohort_status_t cohort_optimizer_load_checkpoint(cohort_optimizer_t* optimizer, const char* dir,
                                                            cohort_checkpoint_info_t* info, int* found) {
  return guard("cohort_optimizer_load_checkpoint", [&] {
    cohort_optimizer_t& o = live(optimizer);
    need(dir, "dir");
    need(info, "info");
    need(found, "found");
    capi::check_struct_size(info->struct_size, sizeof(cohort_checkpoint_info_t), "info");
    // Rank 0 reads and restores; the outcome and position travel to every rank first, so
    // that a failure on rank 0 fails every rank instead of leaving them in a broadcast.
    Tensor head = Tensor::empty({6}, DType::kI64);
    int64_t* h = head.data_as<int64_t>();
    std::fill(h, h + 6, 0);
    std::optional<Error> error;
    if (o.model->runtime->rank() == 0) {
      try {
        CheckpointDir cd(dir);
        if (auto file = cd.latest()) {
          Checkpoint ck = read_checkpoint(*file);
          restore_parameters(ck, o.config.get_string("model"), o.model_tensors(), *file);
          restore_optimizer_state(ck, *o.optimizer, *file);
          h[1] = 1;
          h[2] = ck.epoch;
          h[3] = ck.step;
          h[4] = ck.pipeline_epoch;
          h[5] = ck.pipeline_step;
        }
      } catch (const Error& e) {
        error = e;
        h[0] = static_cast<int64_t>(e.code());
      }
    }
    o.comm->broadcast("checkpoint/head", head, 0);
    if (error) throw *error;
    if (h[0] != 0)
      fail(static_cast<Code>(h[0]), "rank 0 could not load the checkpoint in '", dir, "' (its message says why)");
    *found = static_cast<int>(h[1]);
    cohort_checkpoint_info_t full{};
    full.epoch = h[2];
    full.step = h[3];
    full.pipeline_epoch = h[4];
    full.pipeline_step = h[5];
    fill_out(info, full, "info");
    if (*found) {
      o.dist->broadcast_parameters(0);
      for (const Parameter& s : o.model->graph->states()) o.comm->broadcast("state/" + s.name, s.value, 0);
    }
  });
}

COHORT_API cohort_status_t cohort_metrics_create(int64_t warmup_steps, cohort_metrics_t** out) {
  return guard("cohort_metrics_create", [&] {
    need(out, "out");
    *out = nullptr;
    require(warmup_steps >= 0, "warmup_steps must be >= 0, got ", warmup_steps);
    *out = new cohort_metrics_t{StepMetrics(warmup_steps)};
  });
}

COHORT_API void cohort_metrics_destroy(cohort_metrics_t* metrics) { delete metrics; }

COHORT_API cohort_status_t cohort_metrics_record(cohort_metrics_t* metrics, double seconds, double data_wait_s,
                                                 double comm_exposed_s, double images) {
  return guard("cohort_metrics_record", [&] {
    need(metrics, "metrics");
    require(seconds >= 0 && data_wait_s >= 0 && comm_exposed_s >= 0 && images >= 0,
            "step timings and images must be >= 0 (seconds ", seconds, ", data_wait_s ", data_wait_s,
            ", comm_exposed_s ", comm_exposed_s, ", images ", images, ")");
    metrics->metrics.record({seconds, data_wait_s, comm_exposed_s, images});
  });
}

COHORT_API cohort_status_t cohort_metrics_summary(const cohort_metrics_t* metrics, cohort_rate_summary_t* out) {
  return guard("cohort_metrics_summary", [&] {
    need(metrics, "metrics");
    const RateSummary r = metrics->metrics.images_per_sec();
    const TimeFractions f = metrics->metrics.time_fractions();
    cohort_rate_summary_t full{};
    full.count = r.count;
    full.median = r.median;
    full.mean = r.mean;
    full.std_error = r.std_error;
    full.jitter = r.jitter;
    full.data_wait = f.data_wait;
    full.comm_exposed = f.comm_exposed;
    full.compute = f.compute;
    fill_out(out, full, "out");
  });
}

COHORT_API cohort_status_t cohort_run_summary_json(const cohort_run_summary_t* summary, char* buffer, size_t size,
                                                   size_t* needed) {
  return guard("cohort_run_summary_json", [&] {
    need(summary, "summary");
    capi::check_struct_size(summary->struct_size, sizeof(cohort_run_summary_t), "summary");
    require(summary->struct_size == sizeof(cohort_run_summary_t),
            "summary->struct_size must be sizeof(cohort_run_summary_t)");
    const cohort_run_summary_t& c = *summary;
    RunSummary s;
    s.model = c.model ? c.model : "";
    s.ranks = c.ranks;
    s.local_ranks = c.local_ranks;
    s.device = c.device ? c.device : "cpu";
    s.precision = c.precision ? c.precision : "f32";
    s.data = c.data ? c.data : "synthetic";
    s.batch_per_rank = c.batch_per_rank;
    s.global_batch = c.global_batch;
    s.steps = c.steps;
    s.warmup_steps = c.warmup_steps;
    s.images_per_sec = {c.images_per_sec.count, c.images_per_sec.median, c.images_per_sec.mean,
                        c.images_per_sec.std_error, c.images_per_sec.jitter};
    s.time_fraction = {c.images_per_sec.data_wait, c.images_per_sec.comm_exposed, c.images_per_sec.compute};
    s.epochs = c.epochs;
    s.loss = c.loss;
    if (c.has_top1) {
      s.top1 = c.top1;
      s.top5 = c.top5;
    }
    s.wall_s = c.wall_s;
    std::string text = run_summary_json(s);
    if (c.extra_json && *c.extra_json && !text.empty() && text.back() == '}') {
      text.pop_back();
      text += std::string(", ") + c.extra_json + "}";
    }
    capi::copy_out(text, buffer, size, needed);
  });
}

}  // extern "C"
