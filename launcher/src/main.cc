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
#include "restart.h"
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

// Whether the program will find a checkpoint to resume from after a restart.
bool program_checkpoints(const Request& request, const Context& context) {
  for (const std::string& arg : request.program)
    if (arg.rfind("--checkpoint_dir", 0) == 0 || arg.rfind("--checkpoint-dir", 0) == 0) return true;
  for (const Export& e : request.exports)
    if (e.name == "COHORT_CHECKPOINT_DIR") return true;
  return context.env.count("COHORT_CHECKPOINT_DIR") != 0;
}

std::string failure_cause(const JobResult& result) {
  if (result.failure) return result.failure->reason;
  return "the job failed with exit status " + std::to_string(result.exit_status) + " (mpirun did not say which rank)";
}

// The index in current.hosts of the host the job's failure points at, or -1. A lost
// host's report then names the ranks that ran there.
int locate_failure(JobResult& result, const Plan& plan, const Attempt& current) {
  if (!result.failure) return -1;
  RankFailure& f = *result.failure;
  const int failed = failed_host(current.hosts, current.np, plan.ranks_fill_slots, f, is_this_machine);
  if (f.rank < 0 && f.lost_rank < 0 && plan.ranks_fill_slots)
    if (const std::string ranks = ranks_on_host(current.hosts, current.np, failed); !ranks.empty())
      f.reason += ", where " + ranks + " ran";
  return failed;
}

// Decides where restart number `restart` runs after `result`, whose failure points at
// current.hosts[failed] (-1: unknown), and says so on stderr.
Attempt next_attempt(const Request& request, const Attempt& current, const JobResult& result, int failed, int restart) {
  const RestartPlan next = plan_restart(current, request.exclude_failed_hosts, request.min_np, failed);
  std::string where;
  if (!next.dropped.empty())
    where = "leaving out host " + next.dropped + ": " + std::to_string(next.next.np) + " rank" +
            (next.next.np == 1 ? "" : "s") + " on " + host_list_text(next.next.hosts);
  else if (!next.kept.empty())
    where = "on the same hosts (" + next.kept + ")";
  else
    where = "on the same hosts";
  std::fprintf(stderr, "cohortrun: restart %d of %d after %s; %s\n", restart, request.max_restarts,
               failure_cause(result).c_str(), where.c_str());
  return next.next;
}

int run(const Request& request) {
  const Context context = current_context();
  Attempt attempt = first_attempt(request);
  for (int restart = 0;; ++restart) {
    const Request each = attempt_request(request, attempt, restart);
    const Plan plan = build_plan(each, attempt.np, context);
    if (restart == 0) {
      notes(plan, context, request.np);
      if (request.max_restarts > 0 && !program_checkpoints(request, context))
        std::fputs(
            "cohortrun: --max-restarts: the program gets no --checkpoint_dir, so a restart starts it from the "
            "beginning\n",
            stderr);
    }
    if (request.dry_run) {
      std::printf("%s\n", shell_join(plan.argv).c_str());
      return 0;
    }
    if (!plan.output_dir.empty()) make_directories(plan.output_dir);
    std::fflush(stdout);
    JobResult result = run_job(plan.argv, job_options(request, plan));
    const int failed = locate_failure(result, plan, attempt);
    report_job(result, attempt.np);
    if (!plan.output_dir.empty())
      std::fprintf(stderr, "cohortrun: each rank's output is in %s/1/rank.N/{stdout,stderr}\n",
                   plan.output_dir.c_str());
    if (result.exit_status == 0 && restart > 0)
      std::fprintf(stderr, "cohortrun: the job succeeded after %d restart%s\n", restart, restart == 1 ? "" : "s");
    if (result.exit_status == 0 || result.interrupted_by || restart == request.max_restarts) {
      if (result.exit_status != 0 && request.max_restarts > 0 && !result.interrupted_by)
        std::fprintf(stderr, "cohortrun: giving up after %d restart%s\n", restart, restart == 1 ? "" : "s");
      return result.exit_status;
    }
    attempt = next_attempt(request, attempt, result, failed, restart + 1);
  }
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
