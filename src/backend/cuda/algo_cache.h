// The convolution algorithms a CUDA backend chose, once per shape: the key names
// everything that decides the choice (direction, shapes, window, groups, data type,
// layout, math policy); the value is cuDNN's algorithm, the math type it runs with and
// its workspace. Shared by every plan of a backend, so a shape searched for the
// training plan is not searched again for the evaluation plan. Thread-safe.
//
// A cache may keep its choices in a file across runs (option cuda_algorithm_cache):
// one line per choice, tab-separated,
//   DEVICE  KEY  ALGO MATH_TYPE WORKSPACE_BYTES TIME_MS
// where DEVICE names the GPU, its compute capability and the cuDNN version (a choice
// holds only where all three match) and KEY is ConvKey::text(). Lines starting with
// '#' are comments. One file can serve several GPUs: lines of other devices are kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

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
  uint64_t hits() const;      // choices found in the cache, read from its file or not

  // Keeps the choices in `path` for `device` (tabs and line breaks in it become spaces):
  // reads that device's choices when the file exists, and save() writes there. Throws
  // kCorruptData naming the file and line of a line that is not a choice, kIo when the
  // file cannot be read.
  void attach(std::filesystem::path path, std::string device);
  // Writes the choices searched since attach() or the last save() to the file, with
  // every line it holds now (other devices', another process's) except the ones these
  // replace, atomically (core/files.h): its comments first, then the choices sorted by
  // device and key. Does nothing without a file or a new search. Holds the cache's lock
  // meanwhile (once per plan built).
  void save();
  size_t loaded() const;  // choices read by attach()

 private:
  mutable std::mutex mu_;
  std::map<std::string, ConvChoice> choices_;
  uint64_t searches_ = 0, hits_ = 0;
  std::filesystem::path file_;
  std::string device_;
  std::map<std::string, ConvChoice> unsaved_;  // searched since the file was last written
  size_t loaded_ = 0;
};

// One line of an algorithm cache file, parsed: false (with `why`) where it is not
// "DEVICE<TAB>KEY<TAB>ALGO MATH_TYPE WORKSPACE TIME_MS" with whole numbers >= 0 and a
// finite time >= 0.
bool parse_algo_line(std::string_view line, std::string& device, std::string& key, ConvChoice& choice,
                     std::string& why);
std::string algo_line(std::string_view device, std::string_view key, const ConvChoice& choice);

}  // namespace cohort::backend
