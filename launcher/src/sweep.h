// cohortrun sweep: the same job at several sizes and, with --over, at every value of
// some library settings (the cross product); each run's JSON summary read back, and the
// table (ranks, the swept settings, images/sec, speedup, efficiency, loss, top-1) printed
// and written as CSV and JSON. A run that fails is recorded as failed and the sweep goes
// on.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "command_line.h"
#include "json.h"

namespace cohortrun {

// The line without the "[1,0]<stdout>:" prefix that --tag-output adds.
std::string_view strip_output_tag(std::string_view line);

// True for a run-summary line (after any --tag-output prefix): a JSON object whose
// "schema" is "cohort.run/1".
bool is_summary_line(std::string_view line);

struct SweepRow {
  int ranks = 0;
  std::vector<std::pair<std::string, std::string>> settings;  // the swept ones, in --over order
  std::optional<double> images_per_sec;                       // the summary's images_per_sec.median (global)
  std::optional<double> speedup;     // rate / rate of the first size that worked (same settings)
  std::optional<double> efficiency;  // speedup / (ranks / ranks of that size)
  std::optional<double> loss, top1;  // the summary's, when it has them
  int exit_status = 0;
  std::string summary;  // the summary line as printed, or ""
  std::string error;    // why there is no number
};

// Fills images_per_sec from a summary line (error set when it has none).
void read_summary(SweepRow& row, const std::string& line);

// Speedup and efficiency against the first row with the same settings that has a rate.
void compute_scaling(std::vector<SweepRow>& rows);

// The runs of a sweep: every size with every combination of the --over values (the
// first setting varies slowest, the sizes fastest).
std::vector<SweepRow> sweep_points(const std::vector<int>& sizes, const std::vector<SweepOption>& over);

std::string sweep_table(const std::vector<SweepRow>& rows);
std::string sweep_csv(const std::vector<SweepRow>& rows);
std::string sweep_json(const std::vector<SweepRow>& rows, const std::vector<std::string>& program);

// Runs the sweep; the exit status is 0 when every size gave a summary.
int run_sweep(const Request& request);

}  // namespace cohortrun
