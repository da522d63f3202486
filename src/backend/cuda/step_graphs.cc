#include "backend/cuda/step_graphs.h"

#include <exception>

#include "core/status.h"

namespace cohort::backend::cuda {

StepGraphs::StepGraphs(const std::vector<StepKind>& kinds, int warmup) : warmup_(warmup) {
  require(warmup >= 1, "CUDA graphs need at least one eager pass before the capture, got ", warmup);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const bool device = kinds[i] == StepKind::kDevice;
    if (segments_.empty() || segments_.back().device != device)
      segments_.push_back({i, i + 1, device});
    else
      segments_.back().end = i + 1;
  }
  graphs_.resize(segments_.size());
}

void StepGraphs::eager(const Segment& s, const std::function<void(size_t)>& run) const {
  for (size_t i = s.begin; i < s.end; ++i) run(i);
}

void StepGraphs::pass(const std::function<void(size_t)>& run, GraphOps& ops) {
  const bool warming = passes_ < warmup_;
  if (passes_ <= warmup_) ++passes_;
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Segment& s = segments_[k];
    if (!s.device || warming || disabled()) {
      eager(s, run);
      continue;
    }
    if (!graphs_[k]) {
      ops.begin_capture();
      try {
        eager(s, run);  // enqueued into the graph, not run
        graphs_[k] = ops.end_capture();
      } catch (const std::exception& e) {
        ops.abandon_capture();
        for (auto& g : graphs_) g.reset();
        captured_ = false;
        why_disabled_ = e.what();
        eager(s, run);  // runs it for real (or throws the step's own error again)
        continue;
      }
      captured_ = true;
    }
    ops.launch(graphs_[k]);
  }
}

void StepGraphs::reset() {
  for (auto& g : graphs_) g.reset();
  passes_ = 0;
  captured_ = false;
}

}  // namespace cohort::backend::cuda
