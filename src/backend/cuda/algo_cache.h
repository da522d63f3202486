// The convolution algorithms a CUDA backend chose, once per shape: the key names
// everything that decides the choice (direction, shapes, window, groups, data type,
// layout, math policy); the value is cuDNN's algorithm, the math type it runs with and
// its workspace. Shared by every plan of a backend, so a shape searched for the
// training plan is not searched again for the evaluation plan. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "backend/net_spec.h"

namespace cohort::backend {

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

struct ConvKey {
  ConvPass pass = ConvPass::kForward;
  Shape input, output, filter;  // [N, C, H, W], [N, K, P, Q], [K, C / groups, R, S]
  Window win;
  int groups = 1;
  std::string dtype = "f32";  // what the convolution computes in
  Layout layout = Layout::kNCHW;
  bool tf32 = false;
  std::string text() const;  // the key as one string (and for logs)
};

struct ConvChoice {
  int algo = 0;       // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  int math_type = 0;  // cudnnMathType_t it was measured with
  size_t workspace = 0;
  float time_ms = 0;  // as measured by the search (0: a heuristic's choice)
};

class AlgoCache {
 public:
  // The cached choice for `key`, or search() once and remember what it returns.
  ConvChoice find(const ConvKey& key, const std::function<ConvChoice()>& search);
  size_t size() const;
  uint64_t searches() const;  // search() calls so far
  uint64_t hits() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, ConvChoice> choices_;
  uint64_t searches_ = 0, hits_ = 0;
};

}  // namespace cohort::backend
