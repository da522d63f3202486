#include "data/sampler.h"

#include <numeric>

#include "core/status.h"
#include "kernels/philox.h"

namespace cohort::data {

Sampler::Sampler(const ShardOptions& o) : o_(o) {
  require(o.size >= 1 && o.rank >= 0 && o.rank < o.size, "rank ", o.rank, " is outside [0, ", o.size, ")");
  require(o.batch_size >= 1, "batch_size must be at least 1");
  require(o.dataset_size >= 1, "the dataset is empty");
  int64_t n = o.dataset_size, p = o.size;
  int64_t mine = n / p + (o.rank < n % p ? 1 : 0);
  if (o.drop_remainder) {
    steps_ = (n / p) / o.batch_size;
    require(steps_ >= 1, "with remainder=drop, ", n, " samples over ", p, " ranks leave no full batch of ",
            o.batch_size, " (use remainder=pad or a smaller batch_size)");
    valid_per_epoch_ = steps_ * o.batch_size;
  } else {
    steps_ = ((n + p - 1) / p + o.batch_size - 1) / o.batch_size;
    valid_per_epoch_ = mine;
  }
}

std::vector<int64_t> Sampler::permutation(int64_t epoch) const {
  std::vector<int64_t> perm(static_cast<size_t>(o_.dataset_size));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (!o_.shuffle) return perm;
  // Fisher-Yates with Philox words keyed by (seed, epoch): the same on every rank and run.
  const uint64_t stream = 0x5348554646000000ull ^ static_cast<uint64_t>(epoch);
  for (int64_t i = o_.dataset_size - 1; i > 0; --i) {
    auto r = kernels::philox4x32(static_cast<uint64_t>(i), stream, o_.seed);
    uint64_t word = (uint64_t(r.v[0]) << 32) | r.v[1];
    int64_t j = static_cast<int64_t>(word % static_cast<uint64_t>(i + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

void Sampler::batch(int64_t epoch, int64_t step, std::vector<int64_t>& out) {
  if (epoch != cached_epoch_) {
    perm_ = permutation(epoch);
    cached_epoch_ = epoch;
  }
  out.assign(static_cast<size_t>(o_.batch_size), -1);
  int64_t n = o_.dataset_size, p = o_.size;
  int64_t mine = n / p + (o_.rank < n % p ? 1 : 0);
  if (o_.drop_remainder) mine = steps_ * o_.batch_size;
  for (int64_t k = 0; k < o_.batch_size; ++k) {
    int64_t local = step * o_.batch_size + k;  // position in this rank's share
    if (local >= mine) break;
    out[static_cast<size_t>(k)] = perm_[static_cast<size_t>(o_.rank + local * p)];
  }
}

}  // namespace cohort::data
