#include "sweep.h"

#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "job.h"
#include "plan.h"
#include "text.h"

namespace cohortrun {
namespace {

std::string fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

std::string_view strip_output_tag(std::string_view line) {
  // --tag-output writes "[1,0]<stdout>:" (job, rank, stream) before each line.
  if (line.empty() || line.front() != '[') return line;
  const size_t end = line.find(">:");
  if (end == std::string_view::npos || line.find("]<") == std::string_view::npos || end > 40) return line;
  return line.substr(end + 2);
}

bool is_summary_line(std::string_view line) {
  line = strip_output_tag(line);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  if (line.empty() || line.front() != '{' || line.find("cohort.run/1") == std::string_view::npos) return false;
  try {
    const Json j = parse_json(line);
    const Json* schema = j.get("schema");
    return schema && std::holds_alternative<std::string>(schema->value) &&
           std::get<std::string>(schema->value) == "cohort.run/1";
  } catch (const std::exception&) {
    return false;
  }
}

void read_summary(SweepRow& row, const std::string& line) {
  row.summary = line;
  try {
    const Json j = parse_json(line);
    const Json* rate = j.get("images_per_sec");
    const Json* median = rate ? rate->get("median") : nullptr;
    if (median && median->is_number())
      row.images_per_sec = median->number();
    else
      row.error = "the summary has no images_per_sec.median";
  } catch (const std::exception& e) {
    row.error = std::string("unreadable summary: ") + e.what();
  }
}

void compute_scaling(std::vector<SweepRow>& rows) {
  const SweepRow* base = nullptr;
  for (const SweepRow& r : rows)
    if (r.images_per_sec && *r.images_per_sec > 0) {
      base = &r;
      break;
    }
  if (!base) return;
  for (SweepRow& r : rows) {
    if (!r.images_per_sec) continue;
    r.speedup = *r.images_per_sec / *base->images_per_sec;
    r.efficiency = *r.speedup / (static_cast<double>(r.ranks) / base->ranks);
  }
}

std::string sweep_table(const std::vector<SweepRow>& rows) {
  std::string out = "ranks  images/sec   speedup  efficiency\n";
  for (const SweepRow& r : rows) {
    char line[256];
    if (r.images_per_sec)
      std::snprintf(line, sizeof line, "%5d  %10.1f  %7.2fx  %9.1f%%\n", r.ranks, *r.images_per_sec,
                    r.speedup.value_or(0), 100 * r.efficiency.value_or(0));
    else
      std::snprintf(line, sizeof line, "%5d  %10s  %8s  %10s  (%s)\n", r.ranks, "-", "-", "-", r.error.c_str());
    out += line;
  }
  return out;
}

std::string sweep_csv(const std::vector<SweepRow>& rows) {
  std::string out = "ranks,images_per_sec,speedup,efficiency,exit_status\n";
  for (const SweepRow& r : rows) {
    out += std::to_string(r.ranks) + "," + (r.images_per_sec ? fixed(*r.images_per_sec, 3) : "") + "," +
           (r.speedup ? fixed(*r.speedup, 4) : "") + "," + (r.efficiency ? fixed(*r.efficiency, 4) : "") + "," +
           std::to_string(r.exit_status) + "\n";
  }
  return out;
}

std::string sweep_json(const std::vector<SweepRow>& rows, const std::vector<std::string>& program) {
  auto opt = [](const std::optional<double>& v) { return v ? json_number(*v) : std::string("null"); };
  std::string out = "{\"schema\": \"cohort.sweep/1\", \"program\": [";
  for (size_t i = 0; i < program.size(); ++i) out += (i ? ", " : "") + json_quote(program[i]);
  out += "], \"runs\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const SweepRow& r = rows[i];
    out += std::string(i ? ",\n  " : "\n  ") + "{\"ranks\": " + std::to_string(r.ranks) +
           ", \"images_per_sec\": " + opt(r.images_per_sec) + ", \"speedup\": " + opt(r.speedup) +
           ", \"efficiency\": " + opt(r.efficiency) + ", \"exit_status\": " + std::to_string(r.exit_status) +
           ", \"error\": " + (r.error.empty() ? "null" : json_quote(r.error)) +
           ", \"summary\": " + (r.summary.empty() || !r.error.empty() ? "null" : r.summary) + "}";
  }
  return out + "\n]}\n";
}

int run_sweep(const Request& request) {
  const Context context = current_context();
  Request each = request;
  bool json_asked = false;
  for (const Export& e : each.exports) json_asked |= e.name == "COHORT_JSON";
  if (!json_asked) each.exports.push_back({"COHORT_JSON", "true", "sweep"});
  // Check every size before the first run starts.
  std::vector<Plan> plans;
  for (int np : request.sweep_sizes) plans.push_back(build_plan(each, np, context));
  if (context.root) std::fputs("cohortrun: running as root: passing --allow-run-as-root to mpirun\n", stderr);

  std::vector<SweepRow> rows;
  for (size_t i = 0; i < plans.size(); ++i) {
    SweepRow row;
    row.ranks = request.sweep_sizes[i];
    std::fprintf(stderr, "cohortrun sweep: %d rank%s: %s\n", row.ranks, row.ranks == 1 ? "" : "s",
                 shell_join(plans[i].argv).c_str());
    std::string summary;
    JobOptions options;
    options.on_stdout_line = [&summary](const std::string& line) {
      if (is_summary_line(line)) summary = strip_output_tag(line);
    };
    const JobResult result = run_job(plans[i].argv, options);
    report_job(result, row.ranks);
    row.exit_status = result.exit_status;
    if (result.interrupted_by) return result.exit_status;
    if (result.exit_status != 0)
      row.error = "the job failed with exit status " + std::to_string(result.exit_status);
    else if (summary.empty())
      row.error =
          "no run summary line ({\"schema\": \"cohort.run/1\", …}) in the output: does the program print it with "
          "--json?";
    else
      read_summary(row, summary);
    rows.push_back(std::move(row));
  }
  compute_scaling(rows);
  std::fputs(sweep_table(rows).c_str(), stdout);
  const std::string prefix = request.sweep_prefix.empty() ? "cohort-sweep" : request.sweep_prefix;
  write_file(prefix + ".csv", sweep_csv(rows));
  write_file(prefix + ".json", sweep_json(rows, request.program));
  std::fprintf(stderr, "cohortrun sweep: wrote %s.csv and %s.json\n", prefix.c_str(), prefix.c_str());
  for (const SweepRow& r : rows)
    if (!r.images_per_sec) return r.exit_status != 0 ? r.exit_status : 1;
  return 0;
}

}  // namespace cohortrun
