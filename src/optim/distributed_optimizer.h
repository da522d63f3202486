// DistributedOptimizer: data-parallel training around an Optimizer, as Horovod's
// DistributedOptimizer does it. Each gradient goes to the collectives as soon as the
// graph's gradient-ready hook reports it final, so its allreduce overlaps the rest of
// backward; step() waits for all of them, averages (sum / ranks, with Horovod's
// gradient_predivide_factor split around the sum), and runs the wrapped optimizer.
// With backward_passes_per_step N, gradients are summed locally over N passes and
// exchanged once; with compression=f16 or bf16 they travel as IEEE halves or bfloat16
// (gradients are f32 at every training precision; bf16 halves the bytes on the wire).
//
// Wiring in the trainer: graph.set_grad_ready([&](int i, const Parameter&) {
// dist.gradient_ready(i); }), then after each backward pass dist.step(lr), which returns
// true when it updated the parameters. The collectives are an adapter over the engine
// (allreduce → a kAllreduce TensorEntry with prescale/postscale, wait_all → wait on
// the requests, broadcast → a kBroadcast TensorEntry).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/gradient_passes.h"
#include "optim/loss_scaler.h"
#include "optim/named_tensor.h"
#include "optim/optimizer.h"

namespace cohort {

class Config;

// The collective operations the distributed optimizer uses. Every rank must make the
// same calls with the same names; tensors are contiguous, on the host or on a device.
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts an in-place sum: t = postscale × Σ_ranks (prescale × t). f32, f64, f16 or i64.
  // Returns at once; `t` must stay untouched until wait_all(). `ready` says when t is
  // written (a device tensor still being computed); the reduction starts after it.
  virtual void allreduce_async(const std::string& name, Tensor t, double prescale, double postscale,
                               const Event& ready = {}) = 0;
  // Blocks until every allreduce started since the last wait_all() is done on the
  // host's side and makes work enqueued on `stream` from now on wait for their device
  // work; throws on failure.
  virtual void wait_all(const Stream& stream = {}) = 0;
  // Blocking, in place: every rank's `t` becomes root's.
  virtual void broadcast(const std::string& name, Tensor t, int root) = 0;
};

// One rank, no communication: an allreduce only applies its scales, a broadcast leaves
// the tensor as it is. Lets a single-process run use the same training code.
class SingleRankCollectives : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_async(const std::string& name, Tensor t, double prescale, double postscale,
                       const Event& ready = {}) override;
  void wait_all(const Stream&) override {}
  void broadcast(const std::string& name, Tensor t, int root) override;
};

struct DistributedOptions {
  int backward_passes_per_step = 1;
  bool compress_f16 = false;
  bool compress_bf16 = false;
  bool compressed() const { return compress_f16 || compress_bf16; }
  double gradient_predivide_factor = 1.0;
  // Divide the accumulated gradient by the number of passes, so N passes over batches
  // of B equal one pass over N·B when each pass's loss is a batch mean. (Horovod's
  // PyTorch wrapper leaves the sum; its TensorFlow one has average_aggregated_gradients.)
  bool average_passes = true;
  // False: gradients are never exchanged (every rank trains its own model); broadcasts
  // and the consistency check still go through the collectives.
  bool exchange = true;
  // The unscale and the update as one graph replayed every step (Optimizer::
  // step_captured; cuda_graphs=on), except with LARS.
  bool capture_update = false;

  // From backward_passes_per_step, compression, gradient_predivide_factor and cuda_graphs.
  static DistributedOptions from_config(const Config& config);
};

class DistributedOptimizer {
 public:
  // `params` lists the model's parameters and gradient buffers in the graph's order
  // (the index gradient_ready() receives). Borrowed: optimizer, collectives and the
  // tensors must outlive this object. `stream` is the model's compute stream: sums
  // over passes, compression and the update run on it.
  DistributedOptimizer(Optimizer& optimizer, Collectives& collectives, std::vector<ParamGrad> params,
                       DistributedOptions options = {}, const Stream& stream = {});

  // Parameter `index`'s gradient of the current backward pass is final, or will be
  // when `ready` completes (a device backward still running). On the last pass of a
  // step its exchange starts now. Call from one thread at a time. With one pass per
  // step and no compression the gradient buffer itself is reduced in place: leave it
  // alone until step() returns. With collectives of one rank, one pass, no compression
  // and no predivide factor nothing is exchanged (the average is the gradient).
  void gradient_ready(size_t index, const Event& ready = {});
  // Whether gradient_ready enqueues work on the stream: a sum over passes, a compression.
  bool ready_enqueues() const { return options_.backward_passes_per_step > 1 || options_.compressed(); }

  // Ends a backward pass. Parameters whose gradient was not reported are handled now
  // (every rank must exchange every tensor). Returns false for an accumulation pass;
  // on the last pass waits for the exchanges, updates the parameters with `lr` (unless
  // the loss scaler saw an overflow) and returns true.
  bool step(double lr);

  // Optional (borrowed, may be null): the averaged gradients are unscaled before each
  // update, and a step whose gradients overflowed on any rank is skipped on every rank.
  void set_loss_scaler(LossScaler* scaler) { scaler_ = scaler; }
  // Whether the last completed step was skipped because of an overflow.
  bool last_step_skipped() const { return skipped_; }

  // Collective: every rank's parameters and optimizer state (step count included)
  // become root's. Call once after initialisation or after restoring a checkpoint.
  void broadcast_parameters(int root);

  // Collective: compares a CRC32C of every parameter with rank 0's and throws
  // kMismatch naming the first parameter that differs on some rank.
  void check_consistency();

  int pass() const { return passes_.pass(); }  // backward passes taken in the current step
  const DistributedOptions& options() const { return options_; }

 private:
  void exchange(size_t index, const Event& ready);

  Optimizer& optimizer_;
  Collectives& comm_;
  std::vector<ParamGrad> params_;
  DistributedOptions options_;
  Stream stream_;
  LossScaler* scaler_ = nullptr;
  bool skipped_ = false;
  GradientPasses passes_;           // reports and f32 sums over passes (N > 1)
  std::vector<Tensor> wire_;        // f16 or bf16 buffers (compression)
  std::vector<ParamGrad> reduced_;  // what the optimizer steps with
};

}  // namespace cohort
