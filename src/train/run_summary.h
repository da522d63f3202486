// The run summary: one JSON line on rank 0 (--json) that the launcher's sweep and the
// notebook helper read. Schema "cohort.run/1"; fields are added, never renamed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/pipeline_stats.h"
#include "train/metrics.h"

namespace cohort {

struct RunSummary {
  std::string model;
  int64_t ranks = 1;
  int64_t local_ranks = 1;
  std::string device = "cpu";
  std::string precision = "f32";
  std::string data = "synthetic";  // "synthetic" or the data path
  int64_t batch_per_rank = 0;
  int64_t global_batch = 0;
  int64_t steps = 0;
  int64_t warmup_steps = 0;
  RateSummary images_per_sec;  // global (all ranks)
  TimeFractions time_fraction;
  double epochs = 0;
  double loss = 0;  // non-finite (a diverged run) is written as null
  std::optional<double> top1;
  std::optional<double> top5;
  double wall_s = 0;
  // The variable_update mode ("": not written) with its workers and servers, and the
  // staleness of an asynchronous parameter server's updates.
  std::string variable_update;
  int64_t workers = 0, servers = 0;
  struct Staleness {
    double mean = 0;
    int64_t max = 0;
  };
  std::optional<Staleness> staleness;
  // Where the input pipeline spent its CPU: seconds per image of each stage (they sum to
  // the total), the read rate from storage and the stage that limits.
  struct InputStages {
    double read = 0, decode = 0, augment = 0, assemble = 0;
    double read_bytes_per_s = 0;
    std::string limiting_stage;
  };
  std::optional<InputStages> input;
  // Where the ranks' time went in the measured steps: CPU seconds per step of each kind of
  // thread of a rank, the median and the largest over the ranks that compute, and the
  // spread of the ranks' compute times (per step, the longest minus the shortest).
  struct OverRanks {
    double median = 0, max = 0;
  };
  struct Threads {
    OverRanks compute, engine, other;
    std::optional<OverRanks> readers, decoders;  // a pipeline with threads
    double compute_spread_median = 0, compute_spread_p90 = 0;
  };
  std::optional<Threads> threads;
  // Further fields, appended after the fixed ones in order: key → the text of one JSON
  // value. A key that repeats a field written before it (a fixed one, or an earlier
  // extra one) is an error, so a reader never meets the same key twice.
  std::vector<std::pair<std::string, std::string>> extra;
};

// A training pipeline's statistics (one rank's, or summed over ranks) as the summary's
// input stages: each stage's CPU seconds per decoded image (at least one image), the
// bytes read per second of elapsed time (0 before any time has passed) and the stage
// that limits.
RunSummary::InputStages input_stages(const data::PipelineStats& stats);

inline constexpr const char* kRunSummarySchema = "cohort.run/1";

// The line, without a trailing newline:
// {"schema": "cohort.run/1", "model": …, "ranks": …, "local_ranks": …, "device": …,
//  "precision": …, "data": …, "batch_per_rank": …, "global_batch": …, "steps": …,
//  "warmup_steps": …, "images_per_sec": {"median", "mean", "stderr", "jitter"},
//  "time_fraction": {"data_wait", "comm_exposed", "compute"}, "epochs": …, "loss": …,
//  "top1": … | null, "top5": … | null, "wall_s": …,
//  ["variable_update": …, "workers": …, "servers": …, ["staleness": {"mean", "max"}]],
//  ["input": {"cpu_s_per_image": {"read", "decode", "augment", "assemble", "total"},
//             "read_bytes_per_s": …, "limiting_stage": …}],
//  ["threads": {"compute", "engine", "other", ["readers", "decoders"]} each {"median", "max"},
//   "compute_spread_s": {"median", "p90"}], extra…}
// Throws kInvalidArgument naming an extra field that has no value, is not one JSON
// value or repeats a key.
std::string run_summary_json(const RunSummary& s);

}  // namespace cohort
