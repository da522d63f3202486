// cohortrun: starts a cohort program on N ranks through Open MPI's mpirun.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <cohort/cohort.h>

#include "check_build.h"
#include "command_line.h"
#include "job.h"
#include "plan.h"
#include "sweep.h"
#include "text.h"

namespace cohortrun {
namespace {

void make_directories(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST)
      throw UsageError("--output-dir " + dir + ": cannot create " + prefix + ": " + std::strerror(errno));
    if (slash == std::string::npos) break;
  }
}

void notes(const Plan& plan, const Context& context, int np) {
  if (context.root) std::fputs("cohortrun: running as root: passing --allow-run-as-root to mpirun\n", stderr);
  if (!plan.monitored)
    std::fputs(
        "cohortrun: no cohortrun-monitor next to cohortrun: a failing rank is named only when mpirun "
        "reports it\n",
        stderr);
  if (plan.oversubscribed)
    std::fprintf(stderr, "cohortrun: %d ranks on %d slot%s: oversubscribing (ranks yield when idle)\n", np, plan.slots,
                 plan.slots == 1 ? "" : "s");
}

int run(const Request& request) {
  const Context context = current_context();
  const Plan plan = build_plan(request, request.np, context);
  notes(plan, context, request.np);
  if (request.dry_run) {
    std::printf("%s\n", shell_join(plan.argv).c_str());
    return 0;
  }
  if (!plan.output_dir.empty()) make_directories(plan.output_dir);
  std::fflush(stdout);
  const JobResult result = run_job(plan.argv);
  report_job(result, request.np);
  if (!plan.output_dir.empty())
    std::fprintf(stderr, "cohortrun: each rank's output is in %s/1/rank.N/{stdout,stderr}\n", plan.output_dir.c_str());
  return result.exit_status;
}

}  // namespace

}  // namespace cohortrun

int main(int argc, char** argv) {
  using namespace cohortrun;
  try {
    const Request request = parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    switch (request.mode) {
      case Mode::kHelp:
        std::fputs(usage_text().c_str(), stdout);
        std::printf("\n%s", cohort_option_help(nullptr));
        return 0;
      case Mode::kVersion:
        std::printf("cohortrun (cohort %s)\n", cohort_version_string());
        return 0;
      case Mode::kCheckBuild: {
        const Context context = current_context();
        const auto path = context.env.find("PATH");
        std::fputs(check_build_report(find_executable("mpirun", path == context.env.end() ? "" : path->second)).c_str(),
                   stdout);
        return 0;
      }
      case Mode::kSweep:
        return run_sweep(request);
      case Mode::kRun:
        return run(request);
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 1;
  }
  return 1;
}
