// The order of an epoch and its split across ranks: a permutation seeded by
// (seed, epoch), rank r taking every size-th entry from position r, and the same
// number of batches on every rank (the remainder padded or dropped) so that uneven
// data never leaves a rank waiting in a collective.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::data {

struct ShardOptions {
  int64_t dataset_size = 0;
  int rank = 0, size = 1;
  int64_t batch_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_remainder = false;
};

class Sampler {
 public:
  // Throws kInvalidArgument when a rank would get no batch at all.
  explicit Sampler(const ShardOptions& options);

  int64_t steps_per_epoch() const { return steps_; }
  // Samples of the whole dataset this rank sees per epoch, padding excluded (the
  // expected value; exact for every epoch).
  int64_t valid_per_epoch() const { return valid_per_epoch_; }
  // The source indices of batch `step` of `epoch` on this rank; -1 marks padding,
  // which always sits at the end of the batch.
  void batch(int64_t epoch, int64_t step, std::vector<int64_t>& out);
  // The permutation of an epoch (the identity without shuffle).
  std::vector<int64_t> permutation(int64_t epoch) const;

 private:
  ShardOptions o_;
  int64_t steps_ = 0;
  int64_t valid_per_epoch_ = 0;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace cohort::data
