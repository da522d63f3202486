#include "backend/cuda/algo_cache.h"

#include "core/logging.h"
#include "core/status.h"

namespace cohort::backend {

std::string ConvKey::text() const {
  const char* p = pass == ConvPass::kForward ? "fwd" : pass == ConvPass::kBackwardData ? "bwd_data" : "bwd_filter";
  return cat(p, " in", shape_string(input), " out", shape_string(output), " w", shape_string(filter), " k", win.kh, "x",
             win.kw, " s", win.sh, "x", win.sw, " p", win.ph, "x", win.pw, " d", win.dh, "x", win.dw, " g", groups, " ",
             dtype, " ", layout == Layout::kNHWC ? "nhwc" : "nchw", tf32 ? " tf32" : "");
}

ConvChoice AlgoCache::find(const ConvKey& key, const std::function<ConvChoice()>& search) {
  const std::string k = key.text();
  {
    std::lock_guard lock(mu_);
    auto it = choices_.find(k);
    if (it != choices_.end()) {
      ++hits_;
      return it->second;
    }
  }
  // Searched outside the lock: it runs the GPU for a while. Two plans searching the
  // same key at once both search; either result is a good choice.
  const ConvChoice c = search();
  COHORT_LOG_DEBUG("convolution ", k, ": algorithm ", c.algo, ", math type ", c.math_type, ", workspace ", c.workspace,
                   " bytes, ", c.time_ms, " ms");
  std::lock_guard lock(mu_);
  ++searches_;
  return choices_.emplace(k, c).first->second;
}

size_t AlgoCache::size() const {
  std::lock_guard lock(mu_);
  return choices_.size();
}

uint64_t AlgoCache::searches() const {
  std::lock_guard lock(mu_);
  return searches_;
}

uint64_t AlgoCache::hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}

}  // namespace cohort::backend
