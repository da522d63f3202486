#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "backend/precision.h"
#include "core/status.h"
#include "core/strings.h"
#include "train/agreement.h"
#include "train/checkpoint.h"
#include "train/precision.h"
#include "tensor/device_api.h"

namespace cohort::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The first `rows` rows of a batch tensor (a view).
Tensor first_rows(const Tensor& t, int64_t rows) {
  Shape shape = t.shape();
  shape[0] = rows;
  return Tensor::wrap(t.data(), shape, t.dtype(), t.device(), t.strides());
}

// A positive integer of a checkpoint's metadata, or 0 when it is missing or not one.
int64_t metadata_int(const Checkpoint& ck, const std::string& key) {
  const auto it = ck.metadata.find(key);
  if (it == ck.metadata.end()) return 0;
  const std::optional<int64_t> v = parse_int(it->second);
  return v && *v > 0 ? *v : 0;
}

}  // namespace

// What rank 0 found in a checkpoint directory, as every rank receives it.
struct Trainer::SavedHead {
  bool found = false;
  RunPosition position;
  double loss_scale = 0;  // the loss scaler's state (f16 runs; 0: none saved)
  int64_t good_steps = 0;

  Tensor pack() const {
    Tensor t = Tensor::empty({8}, DType::kI64);
    int64_t* v = t.data_as<int64_t>();
    v[0] = found ? 1 : 0;
    v[1] = position.epoch;
    v[2] = position.step;
    v[3] = position.pipeline_epoch;
    v[4] = position.pipeline_step;
    v[5] = position.saved_ranks;
    std::memcpy(&v[6], &loss_scale, sizeof loss_scale);
    v[7] = good_steps;
    return t;
  }
  static SavedHead unpack(const Tensor& t) {
    const int64_t* v = t.data_as<int64_t>();
    SavedHead h{v[0] != 0, {v[1], v[2], v[3], v[4], v[5]}};
    std::memcpy(&h.loss_scale, &v[6], sizeof h.loss_scale);
    h.good_steps = v[7];
    return h;
  }
};

RunPosition rescale_position(const RunPosition& position, const StepShape& saved, const StepShape& now,
                             int64_t pipeline_steps_per_epoch) {
  RunPosition p = position;
  if (saved.update_batch() <= 0 || now.update_batch() <= 0) return p;
  // x86's long double holds products up to 2^64 exactly, and an exact quotient stays exact.
  auto scale = [](int64_t steps, int64_t from, int64_t to) {
    return static_cast<int64_t>(static_cast<long double>(steps) * from / to);
  };
  p.step = scale(position.step, saved.update_batch(), now.update_batch());
  p.pipeline_step = scale(position.pipeline_step, saved.pipeline_batch(), now.pipeline_batch());
  if (pipeline_steps_per_epoch > 0 && p.pipeline_step >= pipeline_steps_per_epoch) {
    ++p.pipeline_epoch;
    p.pipeline_step = 0;
  }
  return p;
}

Trainer::Trainer(std::shared_ptr<Model> model, const Config& config) : model_(std::move(model)), config_(config) {
  Runtime& rt = model_->runtime();
  rt.check_open("creating an optimizer");
  check_precision(config_, rt.device());
  const Roles roles = Roles::from_config(config_, rt.size());
  global_batch_ = roles.update_batch(config_.get_int("batch_size") * config_.get_int("backward_passes_per_step"));
  optimizer_ = std::make_unique<Optimizer>(OptimizerOptions::from_config(config_));
  // Two trainers on one runtime must not share collective names.
  const int index = rt.next_optimizer_index();
  comm_ = std::make_unique<EngineCollectives>(rt.engine(), index == 0 ? std::string("grad/") : cat("grad", index, "/"));
  model_->materialize();
  std::vector<ParamGrad> params;
  for (const Parameter& p : model_->graph().params()) params.push_back({p.name, p.value, p.grad});
  const std::string scaling = config_.get_string("loss_scaling");
  if (scaling == "dynamic" ||
      (scaling == "auto" && backend::needs_loss_scaling(backend::parse_precision(config_.get_string("precision")))))
    scaler_ = std::make_unique<LossScaler>(LossScalerOptions{.initial_scale = config_.get_float("loss_scale_init")});
  exchange_ = make_exchange({rt.engine(), *comm_, index, *optimizer_, std::move(params), roles,
                             DistributedOptions::from_config(config_), model_->stream(), scaler_.get()});
  // Validate the schedule's options now when the run's length is not needed for it.
  try {
    lr_schedule();
  } catch (const Error&) {
    if (config_.get_float("warmup_epochs") == 0 && config_.get_string("lr_schedule") == "constant") throw;
    schedule_.reset();
  }
  std::vector<Tensor> traced;
  for (const Parameter& p : model_->graph().params()) traced.push_back(p.value);
  trace_ = instrument::OptimizerTrace::make(config_, rt, std::move(traced));
  hook_token_ =
      model_->set_grad_ready([this](size_t index, const Event& ready) { exchange_->gradient_ready(index, ready); },
                             exchange_->ready_enqueues());
}

Trainer::~Trainer() { model_->clear_grad_ready(hook_token_); }

void Trainer::check_open() const { model_->runtime().check_open("the optimizer"); }

const LrSchedule& Trainer::lr_schedule() {
  if (!schedule_)
    schedule_.emplace(LrScheduleOptions::from_config(config_, global_batch_, steps_per_epoch_, total_steps_));
  return *schedule_;
}

void Trainer::set_run_length(int64_t steps_per_epoch, int64_t total_steps) {
  require(steps_per_epoch >= 0 && total_steps >= 0, "steps_per_epoch (", steps_per_epoch, ") and total_steps (",
          total_steps, ") must be >= 0");
  steps_per_epoch_ = steps_per_epoch;
  total_steps_ = total_steps;
  schedule_.reset();
  lr_schedule();
}

double Trainer::next_lr() { return lr_schedule().lr_at(optimizer_->steps()); }

std::vector<NamedTensor> Trainer::model_tensors() const {
  std::vector<NamedTensor> out;
  for (const Parameter& p : model_->graph().params()) out.push_back({p.name, p.value});
  for (const Parameter& s : model_->graph().states()) out.push_back({s.name, s.value});
  return out;
}

void Trainer::broadcast(int root) {
  check_open();
  synchronize(model_->stream());  // the values are final before they travel
  exchange_->broadcast_parameters(root);
  for (const Parameter& s : model_->graph().states()) comm_->broadcast("state/" + s.name, s.value, root);
}

void Trainer::check_consistency() {
  check_open();
  exchange_->check_consistency();
}

StepStats Trainer::train_step(const Tensor& images, const Tensor& labels, int64_t valid) {
  const auto start = Clock::now();
  check_open();
  const int64_t rows = images.ndim() >= 1 ? images.dim(0) : 0;
  require(valid >= 0 && valid <= rows, "batch->valid is ", valid, " but the batch has ", rows, " rows");
  StepStats st;
  st.lr = next_lr();
  if (trace_) trace_->before_step(st.lr);
  st.images = rows;
  st.valid = valid;
  st.step = optimizer_->steps();
  if (!exchange_->info().worker) return st;  // a dedicated parameter server
  Graph& graph = model_->graph();
  graph.set_step(
      static_cast<uint64_t>(optimizer_->steps() * config_.get_int("backward_passes_per_step") + exchange_->pass()));
  if (scaler_) graph.set_loss_scale(static_cast<float>(scaler_->scale()));
  if (valid > 0) {
    st.loss = model_->forward_backward(first_rows(images, valid), first_rows(labels, valid));
  } else {
    for (const Parameter& p : graph.params()) zero(p.grad, model_->stream());
  }
  st.compute_s = since(start);
  exchange_->take_wait_seconds();
  const auto update_start = Clock::now();
  const bool last_pass = exchange_->step(st.lr);
  st.comm_wait_s = exchange_->take_wait_seconds();
  st.update_s = since(update_start) - st.comm_wait_s;
  graph.record_step(since(start), st.update_s);
  st.step = optimizer_->steps();
  st.updated = last_pass && !exchange_->last_step_skipped();
  st.total_s = since(start);
  if (trace_) trace_->after_step(st.loss, valid, st.total_s);
  return st;
}

StepStats Trainer::train_step_without_batch() {
  require(!exchange_->info().worker, "batch is NULL, but this rank computes: only a dedicated parameter server ",
          "(ps_dedicated) steps without a batch");
  return train_step(Tensor{}, Tensor{}, 0);
}

void Trainer::save_checkpoint(const std::string& dir, const RunPosition& position) {
  check_open();
  require(!dir.empty(), "dir is empty");
  synchronize(model_->stream());  // the last update is done before the copies read it
  exchange_->gather();            // the servers' variables and optimizer state, on rank 0 too
  run_on_root_and_agree(*comm_, "checkpoint/save", 0, cat("save a checkpoint in '", dir, "'"), [&] {
    Checkpoint ck;
    ck.model = model_->name();
    ck.epoch = position.epoch;
    ck.step = optimizer_->steps();
    ck.pipeline_epoch = position.pipeline_epoch;
    ck.pipeline_step = position.pipeline_step;
    ck.seed = static_cast<uint64_t>(config_.get_int("seed"));
    const StepShape shape = step_shape();
    ck.metadata["ranks"] = std::to_string(shape.ranks);
    ck.metadata["batch_size"] = std::to_string(shape.batch_size);
    ck.metadata["backward_passes_per_step"] = std::to_string(shape.passes);
    if (scaler_) {
      ck.metadata["loss_scale"] = format_double(scaler_->scale());
      ck.metadata["loss_scale_good_steps"] = std::to_string(scaler_->good_steps());
    }
    for (const NamedTensor& t : model_tensors()) ck.params.push_back({t.name, clone_host(t.tensor)});
    store_optimizer_state(ck, *optimizer_);
    CheckpointDir(dir, static_cast<int>(config_.get_int("keep_checkpoints"))).save(ck);
  });
}

void Trainer::restore_on_root(const std::string& dir, SavedHead& head) {
  auto file = CheckpointDir(dir).latest();
  if (!file) return;
  Checkpoint ck = read_checkpoint(*file);
  restore_parameters(ck, model_->name(), model_tensors(), *file);
  restore_optimizer_state(ck, *optimizer_, *file);
  if (scaler_ && ck.metadata.count("loss_scale")) {
    const std::optional<double> scale = parse_double(ck.metadata["loss_scale"]);
    require(scale && std::isfinite(*scale) && *scale > 0, "checkpoint ", *file, ": metadata loss_scale '",
            ck.metadata["loss_scale"], "' is not a finite number > 0");
    head.loss_scale = *scale;
    head.good_steps = metadata_int(ck, "loss_scale_good_steps");
  }
  head.found = true;
  RunPosition& position = head.position;
  position = {ck.epoch, ck.step, ck.pipeline_epoch, ck.pipeline_step, metadata_int(ck, "ranks")};
  StepShape saved{metadata_int(ck, "batch_size"), position.saved_ranks, metadata_int(ck, "backward_passes_per_step")};
  const StepShape now = step_shape();
  if (saved.update_batch() > 0 && saved.update_batch() != now.update_batch()) {
    const int64_t ranks = position.saved_ranks;
    position = rescale_position(position, saved, now, steps_per_epoch_ * now.passes);
    position.saved_ranks = ranks;
    optimizer_->set_steps(position.step);
  }
}

StepShape Trainer::step_shape() const {
  return {config_.get_int("batch_size"), model_->runtime().size(), config_.get_int("backward_passes_per_step")};
}

std::optional<RunPosition> Trainer::load_checkpoint(const std::string& dir) {
  check_open();
  require(!dir.empty(), "dir is empty");
  SavedHead head;
  run_on_root_and_agree(*comm_, "checkpoint/load", 0, cat("load the checkpoint in '", dir, "'"),
                        [&] { restore_on_root(dir, head); });
  Tensor packed = head.pack();
  comm_->broadcast("checkpoint/head", packed, 0);
  head = SavedHead::unpack(packed);
  if (!head.found) return std::nullopt;
  if (scaler_ && head.loss_scale > 0) scaler_->set_state(head.loss_scale, head.good_steps);
  broadcast(0);
  return head.position;
}

}  // namespace cohort::train
