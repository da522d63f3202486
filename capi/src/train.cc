// The training shim: translates to train::Trainer (the distributed optimizer, the
// training step, checkpoints) and to the run metrics and summary.
#include "cohort/train.h"

#include <memory>

#include "core/json.h"
#include "handles.h"
#include "runtime/mpi_process.h"
#include "shim.h"
#include "structs.h"
#include "train/metrics.h"
#include "train/run_log.h"
#include "train/run_summary.h"
#include "train/trainer.h"

using namespace cohort;
using capi::guard;
using capi::need;

struct cohort_optimizer_t {
  std::unique_ptr<train::Trainer> trainer;
};

struct cohort_metrics_t {
  StepMetrics metrics;
};

struct cohort_run_log_t {
  std::unique_ptr<train::RunLog> log;  // null on ranks other than 0
};

namespace {

data::PipelineStats pipeline_stats(const cohort_pipeline_stats_t& c) {
  data::PipelineStats s;
  s.decoded = c.decoded;
  s.read_cpu_s = c.read_cpu_s;
  s.decode_cpu_s = c.decode_cpu_s;
  s.augment_cpu_s = c.augment_cpu_s;
  s.assemble_cpu_s = c.assemble_cpu_s;
  s.bytes_read = c.bytes_read;
  s.elapsed_s = c.elapsed_s;
  if (c.limiting_stage) s.limiting_stage = c.limiting_stage;
  return s;
}

train::Trainer& live(const cohort_optimizer_t* o) {
  need(o, "optimizer");
  mpi_process::check_not_poisoned();
  return *o->trainer;
}

// Runs a checkpoint call, which is collective although one rank does the file's work.
// A program written the Horovod way saves (or loads) under `if (rank == 0)`: the other
// ranks never make the call, and rank 0 waits in it until they shut down or
// stall_shutdown_s passes. The error it then gets says why.
template <typename Call>
void every_rank_calls(const char* function, const char* verb, Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    if (e.code() != Code::kPeerShutdown && e.code() != Code::kStalled) throw;
    fail(e.code(), "every rank must call ", function, ": it is collective (rank 0 ", verb,
         " the file, then every rank returns the outcome), unlike a Horovod program's rank-0-only save or load; "
         "a rank that skips it, under `if (rank == 0)`, leaves the others waiting here: ",
         e.what());
  }
}

// The training step; `model`, when given, must be the optimizer's.
void train_step(const cohort_model_t* model, cohort_optimizer_t* optimizer, const cohort_batch_t* batch,
                cohort_train_stats_t* stats) {
  train::Trainer& t = live(optimizer);
  if (model) require(model->model.get() == &t.model(), "the optimizer was created for another model");
  if (stats) capi::check_struct_size<cohort_train_stats_t>(stats->struct_size, "stats");
  train::StepStats st;
  if (!batch) {
    st = t.train_step_without_batch();
  } else {
    const cohort_batch_t b = capi::read_in(batch, cohort_batch_t{}, "batch");
    st =
        t.train_step(capi::tensor_of(&b.images, "batch->images"), capi::tensor_of(&b.labels, "batch->labels"), b.valid);
  }
  if (!stats) return;
  cohort_train_stats_t full{};
  full.loss = st.loss;
  full.lr = st.lr;
  full.images = st.images;
  full.valid = st.valid;
  full.step = st.step;
  full.updated = st.updated ? 1 : 0;
  full.compute_s = st.compute_s;
  full.comm_wait_s = st.comm_wait_s;
  full.update_s = st.update_s;
  full.total_s = st.total_s;
  capi::write_out(stats, full, "stats");
}

}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_optimizer_create(cohort_model_t* model, const cohort_config_t* config,
                                                   cohort_optimizer_t** out) {
  return guard("cohort_optimizer_create", [&] {
    need(out, "out");
    *out = nullptr;
    need(model, "model");
    mpi_process::check_not_poisoned();
    const Config cfg = config ? config->config : model->model->runtime().config();
    auto o = std::make_unique<cohort_optimizer_t>();
    o->trainer = std::make_unique<train::Trainer>(model->model, cfg);
    *out = o.release();
  });
}

COHORT_API void cohort_optimizer_destroy(cohort_optimizer_t* optimizer) {
  try {
    delete optimizer;
  } catch (...) {
  }
}

COHORT_API cohort_status_t cohort_optimizer_set_run_length(cohort_optimizer_t* optimizer, int64_t steps_per_epoch,
                                                           int64_t total_steps) {
  return guard("cohort_optimizer_set_run_length",
               [&] { live(optimizer).set_run_length(steps_per_epoch, total_steps); });
}

COHORT_API cohort_status_t cohort_optimizer_state(const cohort_optimizer_t* optimizer, double* lr, int64_t* steps) {
  return guard("cohort_optimizer_state", [&] {
    train::Trainer& t = live(optimizer);
    if (lr) *lr = t.next_lr();
    if (steps) *steps = t.steps();
  });
}

COHORT_API cohort_status_t cohort_optimizer_info(const cohort_optimizer_t* optimizer, cohort_optimizer_info_t* info) {
  return guard("cohort_optimizer_info", [&] {
    capi::check_struct_size<cohort_optimizer_info_t>(need(info, "info")->struct_size, "info");
    const train::ExchangeInfo e = live(optimizer).exchange_info();
    cohort_optimizer_info_t full{};
    full.variable_update = train::variable_update_name(e.mode);
    full.worker = e.worker ? 1 : 0;
    full.server = e.server ? 1 : 0;
    full.workers = e.workers;
    full.servers = e.servers;
    full.worker_index = e.worker_index;
    full.updates = e.updates;
    full.staleness_sum = e.staleness_sum;
    full.staleness_max = e.staleness_max;
    full.lockstep = train::workers_in_lockstep(e.mode) ? 1 : 0;
    capi::write_out(info, full, "info");
  });
}

COHORT_API cohort_status_t cohort_optimizer_broadcast(cohort_optimizer_t* optimizer, int root) {
  return guard("cohort_optimizer_broadcast", [&] { live(optimizer).broadcast(root); });
}

COHORT_API cohort_status_t cohort_optimizer_check_consistency(cohort_optimizer_t* optimizer) {
  return guard("cohort_optimizer_check_consistency", [&] { live(optimizer).check_consistency(); });
}

COHORT_API cohort_status_t cohort_optimizer_train_step(cohort_optimizer_t* optimizer, const cohort_batch_t* batch,
                                                       cohort_train_stats_t* stats) {
  return guard("cohort_optimizer_train_step", [&] { train_step(nullptr, optimizer, batch, stats); });
}

COHORT_API cohort_status_t cohort_model_train_step(cohort_model_t* model, cohort_optimizer_t* optimizer,
                                                   const cohort_batch_t* batch, cohort_train_stats_t* stats) {
  return guard("cohort_model_train_step", [&] { train_step(need(model, "model"), optimizer, batch, stats); });
}

COHORT_API cohort_status_t cohort_optimizer_save_checkpoint(cohort_optimizer_t* optimizer, const char* dir,
                                                            const cohort_checkpoint_info_t* info) {
  return guard("cohort_optimizer_save_checkpoint", [&] {
    train::Trainer& t = live(optimizer);
    need(dir, "dir");
    const cohort_checkpoint_info_t in = capi::read_in(info, cohort_checkpoint_info_t{}, "info");
    every_rank_calls("cohort_optimizer_save_checkpoint", "writes", [&] {
      t.save_checkpoint(dir, {in.epoch, in.step, in.pipeline_epoch, in.pipeline_step});
    });
  });
}

COHORT_API cohort_status_t cohort_optimizer_load_checkpoint(cohort_optimizer_t* optimizer, const char* dir,
                                                            cohort_checkpoint_info_t* info, int* found) {
  return guard("cohort_optimizer_load_checkpoint", [&] {
    train::Trainer& t = live(optimizer);
    need(dir, "dir");
    need(found, "found");
    capi::check_struct_size<cohort_checkpoint_info_t>(need(info, "info")->struct_size, "info");
    std::optional<train::RunPosition> position;
    every_rank_calls("cohort_optimizer_load_checkpoint", "reads", [&] { position = t.load_checkpoint(dir); });
    *found = position ? 1 : 0;
    const train::RunPosition p = position.value_or(train::RunPosition{});
    capi::write_out(
        info, cohort_checkpoint_info_t{0, p.epoch, p.step, p.pipeline_epoch, p.pipeline_step, p.saved_ranks}, "info");
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
    capi::write_out(out, full, "out");
  });
}

COHORT_API cohort_status_t cohort_run_summary_json(const cohort_run_summary_t* summary, char* buffer, size_t size,
                                                   size_t* needed) {
  return guard("cohort_run_summary_json", [&] {
    // An older, smaller struct: the fields it lacks keep these zero values; a NULL
    // string keeps RunSummary's default.
    const cohort_run_summary_t c = capi::read_in(summary, cohort_run_summary_t{}, "summary");
    RunSummary s;
    if (c.model) s.model = c.model;
    s.ranks = c.ranks;
    s.local_ranks = c.local_ranks;
    if (c.device) s.device = c.device;
    if (c.precision) s.precision = c.precision;
    if (c.data) s.data = c.data;
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
    if (c.variable_update) s.variable_update = c.variable_update;
    s.workers = c.workers;
    s.servers = c.servers;
    if (c.has_staleness) s.staleness = RunSummary::Staleness{c.staleness_mean, c.staleness_max};
    if (c.input)
      s.input = input_stages(pipeline_stats(capi::read_in(c.input, cohort_pipeline_stats_t{}, "summary->input")));
    if (c.extra_json) s.extra = parse_json_members(c.extra_json, "summary->extra_json");
    if (c.threads) {
      const cohort_thread_cpu_t t = capi::read_in(c.threads, cohort_thread_cpu_t{}, "summary->threads");
      auto over_ranks = [](const cohort_over_ranks_t& v) { return RunSummary::OverRanks{v.median, v.max}; };
      RunSummary::Threads threads;
      threads.compute = over_ranks(t.compute);
      threads.engine = over_ranks(t.engine);
      threads.other = over_ranks(t.other);
      if (t.has_input) {
        threads.readers = over_ranks(t.readers);
        threads.decoders = over_ranks(t.decoders);
      }
      threads.compute_spread_median = t.compute_spread_median;
      threads.compute_spread_p90 = t.compute_spread_p90;
      s.threads = threads;
    }
    const std::string text = run_summary_json(s);
    capi::copy_out(text, buffer, size, needed);
  });
}

COHORT_API cohort_status_t cohort_run_log_create(const cohort_runtime_t* runtime, const cohort_config_t* config,
                                                 cohort_run_log_t** out) {
  return guard("cohort_run_log_create", [&] {
    need(out, "out");
    *out = nullptr;
    const Config cfg = config ? config->config : runtime ? runtime->runtime->config() : Config();
    auto log = std::make_unique<cohort_run_log_t>();
    log->log = train::open_run_log(cfg, runtime ? runtime->runtime->rank() : 0);
    *out = log.release();
  });
}

COHORT_API void cohort_run_log_destroy(cohort_run_log_t* log) {
  try {
    delete log;
  } catch (...) {
  }
}

COHORT_API cohort_status_t cohort_run_log_step(cohort_run_log_t* log, const cohort_step_record_t* record) {
  return guard("cohort_run_log_step", [&] {
    need(log, "log");
    const cohort_step_record_t r = capi::read_in(need(record, "record"), cohort_step_record_t{}, "record");
    if (log->log) log->log->step({r.step, r.epoch, r.loss, r.lr, r.step_s, r.data_wait_s, r.comm_exposed_s, r.images});
  });
}

COHORT_API cohort_status_t cohort_run_log_eval(cohort_run_log_t* log, int64_t step,
                                               const cohort_eval_result_t* result) {
  return guard("cohort_run_log_eval", [&] {
    need(log, "log");
    const cohort_eval_result_t r = capi::read_in(need(result, "result"), cohort_eval_result_t{}, "result");
    if (log->log) log->log->evaluation(step, r.top1, r.top5, r.loss);
  });
}

}  // extern "C"
