#include "backend/cuda/algo_cache.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "core/files.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/strings.h"

namespace cohort::backend {
namespace {

constexpr const char* kLineForm = "DEVICE<TAB>KEY<TAB>ALGO MATH_TYPE WORKSPACE_BYTES TIME_MS";

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

// A cache file's lines: its comments (and blank lines) in order, and its choices by
// device and key. An absent file has none.
struct CacheFile {
  std::vector<std::string> comments;
  std::map<std::pair<std::string, std::string>, ConvChoice> choices;
};

CacheFile read_cache(const std::filesystem::path& path) {
  CacheFile f;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) return f;
  std::ifstream in(path);
  if (!in) fail(Code::kIo, "cannot read the convolution algorithm cache '", path.string(), "': ", std::strerror(errno));
  std::string line, device, key, why;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') {
      f.comments.push_back(line);
      continue;
    }
    ConvChoice c;
    if (!parse_algo_line(line, device, key, c, why))
      fail(Code::kCorruptData, "convolution algorithm cache '", path.string(), "' line ", n, ": ", why,
           " (mend or remove the line, or remove the file: the search then runs again)");
    f.choices[{device, key}] = c;
  }
  if (in.bad()) fail(Code::kIo, "reading the convolution algorithm cache '", path.string(), "' failed");
  return f;
}

std::optional<int64_t> whole(std::string_view s, int64_t max) {
  const std::optional<int64_t> v = parse_int(s);
  if (!v || *v < 0 || *v > max) return std::nullopt;
  return v;
}

}  // namespace

bool parse_algo_line(std::string_view line, std::string& device, std::string& key, ConvChoice& choice,
                     std::string& why) {
  const std::vector<std::string> field = split(line, '\t');
  if (field.size() != 3 || field[0].empty() || field[1].empty()) {
    why = cat("expected ", kLineForm, ", got '", line, "'");
    return false;
  }
  const std::vector<std::string> number = split(field[2], ' ');
  if (number.size() != 4) {
    why = cat("expected four numbers (ALGO MATH_TYPE WORKSPACE_BYTES TIME_MS) after the key, got '", field[2], "'");
    return false;
  }
  const std::optional<int64_t> algo = whole(number[0], INT_MAX), math = whole(number[1], INT_MAX),
                               workspace = whole(number[2], INT64_MAX);
  const std::optional<double> time = parse_double(number[3]);
  const int bad = !algo ? 0 : !math ? 1 : !workspace ? 2 : -1;
  if (bad >= 0) {
    const char* names[] = {"ALGO", "MATH_TYPE", "WORKSPACE_BYTES"};
    why = cat(names[bad], " must be a whole number from 0 to ", bad == 2 ? INT64_MAX : INT_MAX, ", got '",
              number[static_cast<size_t>(bad)], "'");
    return false;
  }
  if (!time || !std::isfinite(*time) || *time < 0) {
    why = cat("TIME_MS must be a number >= 0, got '", number[3], "'");
    return false;
  }
  device = field[0];
  key = field[1];
  choice = {static_cast<int>(*algo), static_cast<int>(*math), static_cast<size_t>(*workspace),
            static_cast<float>(*time)};
  return true;
}

std::string algo_line(std::string_view device, std::string_view key, const ConvChoice& c) {
  return cat(device, "\t", key, "\t", c.algo, " ", c.math_type, " ", c.workspace, " ",
             format_double(static_cast<double>(c.time_ms)));
}

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
  if (!file_.empty()) unsaved_.emplace(k, c);
  return choices_.emplace(k, c).first->second;
}

void AlgoCache::attach(std::filesystem::path path, std::string device) {
  CacheFile f = read_cache(path);
  std::lock_guard lock(mu_);
  file_ = std::move(path);
  device_ = one_line(std::move(device));
  for (const auto& [where, choice] : f.choices)
    if (where.first == device_ && choices_.emplace(where.second, choice).second) ++loaded_;
}

void AlgoCache::save() {
  std::lock_guard lock(mu_);
  if (file_.empty() || unsaved_.empty()) return;
  CacheFile f = read_cache(file_);  // what is there now, another process's lines included
  for (const auto& [key, choice] : unsaved_) f.choices[{device_, key}] = choice;
  std::string text;
  if (f.comments.empty()) text = cat("# cohort convolution algorithms: ", kLineForm, "\n");
  for (const std::string& c : f.comments) text += c + "\n";
  for (const auto& [where, choice] : f.choices) text += algo_line(where.first, where.second, choice) + "\n";
  replace_file_atomically(file_, text);
  COHORT_LOG_DEBUG("convolution algorithm cache '", file_.string(), "': ", unsaved_.size(), " new choices written");
  unsaved_.clear();
}

size_t AlgoCache::loaded() const {
  std::lock_guard lock(mu_);
  return loaded_;
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
