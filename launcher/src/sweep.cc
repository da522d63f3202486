#include "sweep.h"

#include <algorithm>
#include <cctype>
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

// A CSV field, quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
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
    if (const Json* loss = j.get("loss"); loss && loss->is_number()) row.loss = loss->number();
    if (const Json* top1 = j.get("top1"); top1 && top1->is_number()) row.top1 = top1->number();
  } catch (const std::exception& e) {
    row.error = std::string("unreadable summary: ") + e.what();
  }
}

void compute_scaling(std::vector<SweepRow>& rows) {
  for (SweepRow& r : rows) {
    if (!r.images_per_sec) continue;
    const SweepRow* base = nullptr;
    for (const SweepRow& b : rows)
      if (b.settings == r.settings && b.images_per_sec && *b.images_per_sec > 0) {
        base = &b;
        break;
      }
    if (!base) continue;
    r.speedup = *r.images_per_sec / *base->images_per_sec;
    r.efficiency = *r.speedup / (static_cast<double>(r.ranks) / base->ranks);
  }
}

std::vector<SweepRow> sweep_points(const std::vector<int>& sizes, const std::vector<SweepOption>& over) {
  std::vector<std::vector<std::pair<std::string, std::string>>> combos = {{}};
  for (const SweepOption& o : over) {
    std::vector<std::vector<std::pair<std::string, std::string>>> next;
    for (const auto& c : combos)
      for (const std::string& v : o.values) {
        next.push_back(c);
        next.back().emplace_back(o.key, v);
      }
    combos = std::move(next);
  }
  std::vector<SweepRow> rows;
  for (const auto& c : combos)
    for (int np : sizes) {
      SweepRow r;
      r.ranks = np;
      r.settings = c;
      rows.push_back(std::move(r));
    }
  return rows;
}

std::string sweep_table(const std::vector<SweepRow>& rows) {
  std::string out = "ranks";
  std::vector<size_t> widths;
  if (!rows.empty())
    for (const auto& [key, value] : rows.front().settings) {
      size_t w = key.size();
      for (const SweepRow& r : rows)
        for (const auto& [k, v] : r.settings)
          if (k == key) w = std::max(w, v.size());
      widths.push_back(w);
      out += "  " + key + std::string(w - key.size(), ' ');
    }
  out += "  images/sec   speedup  efficiency\n";
  for (const SweepRow& r : rows) {
    char line[256];
    std::snprintf(line, sizeof line, "%5d", r.ranks);
    out += line;
    for (size_t i = 0; i < r.settings.size() && i < widths.size(); ++i)
      out +=
          "  " + r.settings[i].second + std::string(widths[i] - std::min(widths[i], r.settings[i].second.size()), ' ');
    if (r.images_per_sec)
      std::snprintf(line, sizeof line, "  %10.1f  %7.2fx  %9.1f%%\n", *r.images_per_sec, r.speedup.value_or(0),
                    100 * r.efficiency.value_or(0));
    else
      std::snprintf(line, sizeof line, "  %10s  %8s  %10s  (failed: %s)\n", "-", "-", "-", r.error.c_str());
    out += line;
  }
  return out;
}

std::string sweep_csv(const std::vector<SweepRow>& rows) {
  std::string out = "ranks";
  if (!rows.empty())
    for (const auto& [key, value] : rows.front().settings) out += "," + key;
  out += ",images_per_sec,speedup,efficiency,exit_status,status,loss,top1\n";
  auto opt = [](const std::optional<double>& v, int digits) { return v ? fixed(*v, digits) : std::string(); };
  for (const SweepRow& r : rows) {
    out += std::to_string(r.ranks);
    for (const auto& [key, value] : r.settings) out += "," + csv_field(value);
    out += "," + opt(r.images_per_sec, 3) + "," + opt(r.speedup, 4) + "," + opt(r.efficiency, 4) + "," +
           std::to_string(r.exit_status) + "," + (r.images_per_sec ? "ok" : "failed") + "," + opt(r.loss, 6) + "," +
           opt(r.top1, 6) + "\n";
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
    std::string settings = "{";
    for (size_t k = 0; k < r.settings.size(); ++k)
      settings += (k ? ", " : "") + json_quote(r.settings[k].first) + ": " + json_quote(r.settings[k].second);
    settings += "}";
    out += std::string(i ? ",\n  " : "\n  ") + "{\"ranks\": " + std::to_string(r.ranks) +
           ", \"settings\": " + settings + ", \"images_per_sec\": " + opt(r.images_per_sec) +
           ", \"speedup\": " + opt(r.speedup) + ", \"efficiency\": " + opt(r.efficiency) +
           ", \"loss\": " + opt(r.loss) + ", \"top1\": " + opt(r.top1) +
           ", \"status\": " + (r.images_per_sec ? "\"ok\"" : "\"failed\"") +
           ", \"exit_status\": " + std::to_string(r.exit_status) +
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
  // Check every point before the first run starts.
  std::vector<SweepRow> rows = sweep_points(request.sweep_sizes, request.sweep_over);
  std::vector<Plan> plans;
  for (const SweepRow& row : rows) {
    Request point = each;
    for (const auto& [key, value] : row.settings) {
      std::string name = "COHORT_" + key;
      for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      point.exports.push_back({name, value, "--over " + key + "=" + value});
    }
    plans.push_back(build_plan(point, row.ranks, context));
  }
  if (context.root) std::fputs("cohortrun: running as root: passing --allow-run-as-root to mpirun\n", stderr);

  for (size_t i = 0; i < plans.size(); ++i) {
    SweepRow& row = rows[i];
    std::string point;
    for (const auto& [key, value] : row.settings) point += " " + key + "=" + value;
    std::fprintf(stderr, "cohortrun sweep: %d rank%s%s: %s\n", row.ranks, row.ranks == 1 ? "" : "s", point.c_str(),
                 shell_join(plans[i].argv).c_str());
    std::string summary;
    JobOptions options = job_options(request, plans[i]);
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
  }
  compute_scaling(rows);
  std::fputs(sweep_table(rows).c_str(), stdout);
  const std::string prefix = request.sweep_prefix.empty() ? "cohort-sweep" : request.sweep_prefix;
  write_file(prefix + ".csv", sweep_csv(rows));
  write_file(prefix + ".json", sweep_json(rows, request.program));
  std::fprintf(stderr, "cohortrun sweep: wrote %s.csv and %s.json\n", prefix.c_str(), prefix.c_str());
  int failed = 0;
  for (const SweepRow& r : rows) failed += r.images_per_sec ? 0 : 1;
  if (failed > 0) std::fprintf(stderr, "cohortrun sweep: %d of %zu runs failed\n", failed, rows.size());
  for (const SweepRow& r : rows)
    if (!r.images_per_sec) return r.exit_status != 0 ? r.exit_status : 1;
  return 0;
}

}  // namespace cohortrun
