#include "backend/cuda/step_graphs.h"

#include <exception>
#include <utility>

#include "core/status.h"

namespace cohort::backend::cuda {

StepGraphs::StepGraphs(const std::vector<StepKind>& kinds, int warmup, bool notify_between)
    : kinds_(kinds), warmup_(warmup) {
  require(warmup >= 1, "CUDA graphs need at least one eager pass before the capture, got ", warmup);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const bool device = kinds[i] == StepKind::kDevice || (kinds[i] == StepKind::kNotify && !notify_between);
    if (segments_.empty() || segments_.back().device != device)
      segments_.push_back({i, i + 1, device});
    else
      segments_.back().end = i + 1;
  }
  graphs_.resize(segments_.size());
  made_.assign(segments_.size(), false);
}

void StepGraphs::eager(const Segment& s, const std::function<void(size_t)>& run,
                       const std::function<void(size_t)>& notify) const {
  for (size_t i = s.begin; i < s.end; ++i) {
    run(i);
    if (kinds_[i] == StepKind::kNotify && notify) notify(i);
  }
}

void StepGraphs::notify_all(const Segment& s, const std::function<void(size_t)>& notify) const {
  if (!notify) return;
  for (size_t i = s.begin; i < s.end; ++i)
    if (kinds_[i] == StepKind::kNotify) notify(i);
}

void StepGraphs::give_up(GraphOps& ops, std::string why) {
  ops.abandon_capture();
  for (auto& g : graphs_) g.reset();
  made_.assign(segments_.size(), false);
  captured_ = false;
  why_disabled_ = why.empty() ? "a capture failed" : std::move(why);
}

void StepGraphs::pass(const std::function<void(size_t)>& run, GraphOps& ops,
                      const std::function<void(size_t)>& notify) {
  const bool warming = passes_ < warmup_;
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Segment& s = segments_[k];
    if (!s.device || warming || disabled()) {
      eager(s, run, notify);
      continue;
    }
    if (!made_[k]) {
      try {
        ops.begin_capture();
        eager(s, run, nullptr);  // enqueued into the graph, not run: nothing to hand out yet
        graphs_[k] = ops.end_capture();
      } catch (const std::exception& e) {
        give_up(ops, e.what());
      } catch (...) {
        give_up(ops, "");
      }
      if (disabled()) {
        eager(s, run, notify);  // runs it for real (or throws the step's own error again)
        continue;
      }
      made_[k] = true;
      captured_ = true;
    }
    if (graphs_[k]) ops.launch(graphs_[k]);  // none: the steps enqueued nothing
    notify_all(s, notify);                   // what the launch recorded, handed out
  }
  // Only a whole pass counts: one that threw may have left lazily made memory unmade.
  if (passes_ <= warmup_) ++passes_;
}

void StepGraphs::reset() {
  for (auto& g : graphs_) g.reset();
  made_.assign(segments_.size(), false);
  passes_ = 0;
  captured_ = false;
}

}  // namespace cohort::backend::cuda
