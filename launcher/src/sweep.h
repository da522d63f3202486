// cohortrun sweep: the same job at several sizes, each run's JSON summary read back,
// and the scaling table (ranks, images/sec, speedup, efficiency) printed and written
// as CSV and JSON.
#pragma once

#include <optional>
#include <string>
#include <string_view>
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
  std::optional<double> images_per_sec;  // the summary's images_per_sec.median (global)
  std::optional<double> speedup;         // rate / rate of the first size that worked
  std::optional<double> efficiency;      // speedup / (ranks / ranks of that size)
  int exit_status = 0;
  std::string summary;  // the summary line as printed, or ""
  std::string error;    // why there is no number
};

// Fills images_per_sec from a summary line (error set when it has none).
void read_summary(SweepRow& row, const std::string& line);

// Speedup and efficiency against the first row that has a rate.
void compute_scaling(std::vector<SweepRow>& rows);

std::string sweep_table(const std::vector<SweepRow>& rows);
std::string sweep_csv(const std::vector<SweepRow>& rows);
std::string sweep_json(const std::vector<SweepRow>& rows, const std::vector<std::string>& program);

// Runs the sweep; the exit status is 0 when every size gave a summary.
int run_sweep(const Request& request);

}  // namespace cohortrun
