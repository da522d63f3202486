// CUDA graphs for the plan's passes (host code, built with or without CUDA): which
// steps of a pass are replayed from captured graphs and which run on the host each time.
//
// A pass is a list of steps, each of which enqueues its work on the plan's stream. A
// device step's work is the same every pass (same kernels, arguments and pointers), so
// a run of device steps can be captured once into a graph and replayed with one launch.
// A host step must run each pass: its kernel arguments change from pass to pass (the
// dropout draws, the loss scale, the labels' presence). A notify step (a gradient-ready
// notification) is a device step with a host part: it records an event (its device
// part, captured) and hands the event to the collective engine (its host part):
// eagerly right after the record; with graphs after the launch of the graph that holds
// the record, each pass. The pass's segments are the maximal runs of device and notify
// steps, captured, and the host steps between them, run as they are. Where the
// listener enqueues work of its own when handed an event (notify_between), notify
// steps run eagerly between the graphs instead, as host steps do, so that its work
// follows its layer's and not the whole run's.
//
// The first `warmup` passes run every step eagerly: they make what a capture must not
// (gradient memory, the ones vectors, the caching allocator's blocks), so that the
// captured steps allocate nothing. The next pass captures each device segment and
// launches it; later passes launch the graphs. A capture that fails (an operation a
// graph cannot hold) turns graphs off for good: that segment and every later pass run
// eagerly, with the reason kept for the log. reset() drops the graphs (the next passes
// warm up and capture anew), e.g. while profiling, which times each step.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cohort::backend::cuda {

enum class StepKind { kDevice, kHost, kNotify };

// What capturing needs of a device (CUDA: stream capture on the plan's stream).
class GraphOps {
 public:
  virtual ~GraphOps() = default;
  virtual void begin_capture() = 0;
  // The executable graph of the work enqueued since begin_capture(), or null when
  // nothing was (nothing to launch); throws when the capture failed (the stream is out
  // of capture mode either way).
  virtual std::shared_ptr<void> end_capture() = 0;
  // Ends a capture that a throwing step left open, discarding it (never throws).
  virtual void abandon_capture() noexcept = 0;
  virtual void launch(const std::shared_ptr<void>& graph) = 0;
};

class StepGraphs {
 public:
  struct Segment {
    size_t begin, end;  // steps [begin, end)
    bool device;        // a run of device steps (captured), or host steps
  };

  StepGraphs(const std::vector<StepKind>& kinds, int warmup, bool notify_between = false);

  // One pass: run(i) runs step i's host code, which enqueues its work; notify(i) runs a
  // notify step's host part, after its work is enqueued (or its graph launched).
  void pass(const std::function<void(size_t)>& run, GraphOps& ops, const std::function<void(size_t)>& notify = nullptr);
  void reset();

  const std::vector<Segment>& segments() const { return segments_; }
  bool captured() const { return captured_; }
  bool disabled() const { return !why_disabled_.empty(); }
  const std::string& why_disabled() const { return why_disabled_; }

 private:
  void eager(const Segment& s, const std::function<void(size_t)>& run, const std::function<void(size_t)>& notify) const;
  void notify_all(const Segment& s, const std::function<void(size_t)>& notify) const;
  void give_up(GraphOps& ops, std::string why);

  std::vector<StepKind> kinds_;
  std::vector<Segment> segments_;
  std::vector<std::shared_ptr<void>> graphs_;  // per segment (null: a host segment, or an empty graph)
  std::vector<bool> made_;                     // per segment: captured
  int warmup_;
  int passes_ = 0;  // whole passes since the last reset (up to warmup + 1)
  bool captured_ = false;
  std::string why_disabled_;
};

}  // namespace cohort::backend::cuda
