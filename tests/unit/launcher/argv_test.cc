// The exact mpirun argument vectors cohortrun builds, for every option combination.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "command_line.h"
#include "plan.h"
#include "text.h"

namespace cohortrun {
namespace {

using Argv = std::vector<std::string>;

Context plain_context() {
  Context c;
  c.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", "/root"}};
  c.root = false;
  c.stdout_tty = false;
  c.cores = 2;
  c.cwd = "/work/here";
  return c;
}

Argv join(std::initializer_list<Argv> parts) {
  Argv out;
  for (const Argv& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Argv plan(const Argv& args, const Context& context = plain_context()) {
  const Request request = parse_command_line(args);
  return build_plan(request, request.np, context).argv;
}

// Open MPI's TCP keepalive for the default --link-timeout (30 s): probes after 10 quiet
// seconds, 3 of them 3 s apart.
const Argv kKeepalive = {"-mca", "oob_tcp_keepalive_time",   "10", "-mca", "oob_tcp_keepalive_intvl", "3",
                         "-mca", "oob_tcp_keepalive_probes", "3"};
// The recommended flags, as every vector below has them unless overridden.
const Argv kFlags = join({{"-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "self,vader,tcp",
                           "-mca", "orte_base_help_aggregate", "0"},
                          kKeepalive});
const Argv kDefaultExports = {"-x", "PATH", "-x", "OMP_WAIT_POLICY=PASSIVE", "-x", "COHORT_PROGRESS=plain"};
const Argv kWatchExport = {"-x", "COHORTRUN_LINK_WATCH"};

TEST(LauncherArgv, PlainRunHasRecommendedFlagsAndExports) {
  EXPECT_EQ(plan({"-np", "2", "--", "/bin/echo", "hi"}),
            join({{"/usr/bin/mpirun", "-np", "2"}, kFlags, kDefaultExports, {"/bin/echo", "hi"}}));
}

TEST(LauncherArgv, ProgramWithoutSeparatorAndProgramOnPath) {
  EXPECT_EQ(plan({"-n", "2", "echo", "--np", "9"}),
            join({{"/usr/bin/mpirun", "-np", "2"}, kFlags, kDefaultExports, {"echo", "--np", "9"}}));
  EXPECT_EQ(plan({"--np=2", "--", "echo", "-np", "9"}),
            join({{"/usr/bin/mpirun", "-np", "2"}, kFlags, kDefaultExports, {"echo", "-np", "9"}}));
}

TEST(LauncherArgv, RootAddsAllowRunAsRootAndTtyGivesProgressTty) {
  Context c = plain_context();
  c.root = true;
  c.stdout_tty = true;
  EXPECT_EQ(plan({"-np", "1", "/bin/true"}, c),
            join({{"/usr/bin/mpirun", "-np", "1", "--allow-run-as-root"},
                  kFlags,
                  {"-x", "PATH", "-x", "OMP_WAIT_POLICY=PASSIVE", "-x", "COHORT_PROGRESS=tty"},
                  {"/bin/true"}}));
}

TEST(LauncherArgv, NotebookShellCommandsAreNotATerminal) {
  EXPECT_TRUE(user_sees_terminal(true, {{"TERM", "xterm"}}));
  EXPECT_FALSE(user_sees_terminal(false, {}));
  // IPython's `!cohortrun` runs on a pty inside a Jupyter kernel.
  EXPECT_FALSE(user_sees_terminal(true, {{"JPY_PARENT_PID", "42"}, {"TERM", "xterm-color"}}));
}

TEST(LauncherArgv, BindCoresGivesEachRankCoresOfItsOwnOnThisHost) {
  Context c = plain_context();
  c.cores = 16;
  const auto placement = [&](const char* np) {
    const Argv argv = plan({"-np", np, "--bind-cores", "/bin/true"}, c);
    return Argv(argv.begin() + 3, argv.begin() + 7);
  };
  EXPECT_EQ(placement("16"), (Argv{"-bind-to", "core", "-map-by", "slot:PE=1"}));
  EXPECT_EQ(placement("8"), (Argv{"-bind-to", "core", "-map-by", "slot:PE=2"}));
  EXPECT_EQ(placement("3"), (Argv{"-bind-to", "core", "-map-by", "slot:PE=5"})) << "a core left over stays free";
  EXPECT_EQ(placement("1"), (Argv{"-bind-to", "core", "-map-by", "slot:PE=16"}));
  EXPECT_EQ(plan({"-np", "2", "--bind-cores", "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "2", "-bind-to", "core", "-map-by", "slot:PE=1"},
                  Argv(kFlags.begin() + 4, kFlags.end()),
                  kDefaultExports,
                  {"/bin/true"}}));
  const auto refused = [&](const Argv& args, const std::string& why) {
    try {
      plan(args, c);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused({"-np", "17", "--bind-cores", "/bin/true"}, "a core for every rank: 17 ranks, 16 cores");
  refused({"-np", "2", "-H", "a:1,b:1", "--bind-cores", "/bin/true"}, "this host only");
  refused({"-np", "2", "--bind-cores", "--mpi-args", "-map-by node", "/bin/true"}, "-bind-to or -map-by");
}

TEST(LauncherArgv, MoreRanksThanCoresOversubscribesAndYields) {
  EXPECT_EQ(plan({"-np", "3", "/bin/true"}), join({{"/usr/bin/mpirun", "-np", "3", "--oversubscribe"},
                                                   kFlags,
                                                   {"-mca", "mpi_yield_when_idle", "1"},
                                                   kDefaultExports,
                                                   {"/bin/true"}}));
}

TEST(LauncherArgv, HostListSlotsDecideOversubscription) {
  EXPECT_EQ(plan({"-np", "4", "-H", "n1:2,n2:2", "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "4", "-H", "n1:2,n2:2"}, kFlags, kDefaultExports, {"/bin/true"}}));
  EXPECT_EQ(plan({"-np", "5", "--host=n1:2,n2:2", "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "5", "-H", "n1:2,n2:2", "--oversubscribe"},
                  kFlags,
                  {"-mca", "mpi_yield_when_idle", "1"},
                  kDefaultExports,
                  {"/bin/true"}}));
  // A host without a count is one slot, as in Open MPI.
  EXPECT_EQ(plan({"-np", "2", "-H", "n1,n2", "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "2", "-H", "n1,n2"}, kFlags, kDefaultExports, {"/bin/true"}}));
}

TEST(LauncherArgv, HostfileSlotsDecideOversubscription) {
  const std::string file = testing::TempDir() + "/cohortrun_hosts";
  std::ofstream(file) << "# cluster\nn1 slots=4\nn2 slots=4 max_slots=8  # second\n\n";
  EXPECT_EQ(plan({"-np", "8", "--hostfile", file, "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "8", "--hostfile", file}, kFlags, kDefaultExports, {"/bin/true"}}));
  EXPECT_EQ(plan({"-np", "9", "--hostfile", file, "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "9", "--hostfile", file, "--oversubscribe"},
                  kFlags,
                  {"-mca", "mpi_yield_when_idle", "1"},
                  kDefaultExports,
                  {"/bin/true"}}));
  std::remove(file.c_str());
}

TEST(LauncherArgv, ExportsOnlyTheVariablesThatAreSet) {
  Context c = plain_context();
  c.env["LD_LIBRARY_PATH"] = "/opt/lib";
  c.env["NCCL_SOCKET_IFNAME"] = "eth0";
  c.env["COHORT_LOG_LEVEL"] = "warn";
  c.env["OMP_NUM_THREADS"] = "1";
  c.env["OMPI_MCA_btl"] = "self";  // mpirun reads these itself
  c.env["NCCLX"] = "no";
  EXPECT_EQ(plan({"-np", "2", "/bin/true"}, c),
            join({{"/usr/bin/mpirun", "-np", "2"},
                  kFlags,
                  {"-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "COHORT_LOG_LEVEL", "-x", "NCCL_SOCKET_IFNAME", "-x",
                   "OMP_NUM_THREADS", "-x", "OMP_WAIT_POLICY=PASSIVE", "-x", "COHORT_PROGRESS=plain"},
                  {"/bin/true"}}));
}

TEST(LauncherArgv, UserWaitPolicyAndProgressAreKept) {
  Context c = plain_context();
  c.env["OMP_WAIT_POLICY"] = "ACTIVE";
  c.env["COHORT_PROGRESS"] = "tty";
  EXPECT_EQ(plan({"-np", "2", "/bin/true"}, c), join({{"/usr/bin/mpirun", "-np", "2"},
                                                      kFlags,
                                                      {"-x", "PATH", "-x", "COHORT_PROGRESS", "-x", "OMP_WAIT_POLICY"},
                                                      {"/bin/true"}}));
  // "auto" is resolved here: the ranks cannot see the user's terminal.
  c.env["COHORT_PROGRESS"] = "auto";
  EXPECT_EQ(plan({"-np", "2", "/bin/true"}, c),
            join({{"/usr/bin/mpirun", "-np", "2"},
                  kFlags,
                  {"-x", "PATH", "-x", "OMP_WAIT_POLICY", "-x", "COHORT_PROGRESS=plain"},
                  {"/bin/true"}}));
}

TEST(LauncherArgv, LibrarySettingsBecomeCohortVariablesInCanonicalForm) {
  EXPECT_EQ(
      plan({"-np", "2", "--fusion-threshold-mb=64", "--cycle_time_ms", "2.50", "--timeline-file", "/tmp/my trace.json",
            "--json", "--no-resume", "--precision", "fp16", "--Batch-Size=1e2", "--", "/bin/true"}),
      join({{"/usr/bin/mpirun", "-np", "2"},
            kFlags,
            kDefaultExports,
            {"-x", "COHORT_FUSION_THRESHOLD_MB=64", "-x", "COHORT_CYCLE_TIME_MS=2.5", "-x",
             "COHORT_TIMELINE_FILE=/tmp/my trace.json", "-x", "COHORT_JSON=true", "-x", "COHORT_RESUME=false", "-x",
             "COHORT_PRECISION=f16", "-x", "COHORT_BATCH_SIZE=100"},
            {"/bin/true"}}));
}

TEST(LauncherArgv, ExplicitSettingReplacesInheritedVariable) {
  Context c = plain_context();
  c.env["COHORT_BATCH_SIZE"] = "8";
  c.env["NCCL_DEBUG"] = "WARN";
  EXPECT_EQ(
      plan({"-np", "2", "--batch_size", "16", "--nccl-debug", "info", "--env", "COHORT_PROGRESS=tty", "/bin/true"}, c),
      join({{"/usr/bin/mpirun", "-np", "2"},
            kFlags,
            {"-x", "PATH", "-x", "OMP_WAIT_POLICY=PASSIVE", "-x", "COHORT_BATCH_SIZE=16", "-x", "NCCL_DEBUG=INFO", "-x",
             "COHORT_PROGRESS=tty"},
            {"/bin/true"}}));
}

TEST(LauncherArgv, MpiArgsOverrideRecommendedFlagsAndComeBeforeTheProgram) {
  EXPECT_EQ(plan({"-np", "2", "--mpi-args", "-mca btl ^openib --bind-to core", "--mpi-args=-x FOO --mca pml ucx",
                  "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "2", "-map-by", "slot", "-mca", "orte_base_help_aggregate", "0"},
                  kKeepalive,
                  kDefaultExports,
                  {"-mca", "btl", "^openib", "--bind-to", "core", "-x", "FOO", "--mca", "pml", "ucx", "/bin/true"}}));
  EXPECT_EQ(plan({"-np", "2", "--mpi-args", "--report-bindings -mca btl_tcp_if_include 'eth0'", "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "2"},
                  kFlags,
                  kDefaultExports,
                  {"--report-bindings", "-mca", "btl_tcp_if_include", "eth0", "/bin/true"}}));
}

TEST(LauncherArgv, SpecialCharactersPassThroughUntouched) {
  const Argv program = {"/bin/echo", "two words", "it's", "\"quoted\"", ";", "$(rm -rf /)", "`id`", "a|b", "*", ""};
  Argv args = {"-np", "1", "--env", "A=x y;$(z)", "--env=B='q' \"r\"", "--timeline_file", "/tmp/$(x);y", "--"};
  args.insert(args.end(), program.begin(), program.end());
  EXPECT_EQ(plan(args), join({{"/usr/bin/mpirun", "-np", "1"},
                              kFlags,
                              kDefaultExports,
                              {"-x", "A=x y;$(z)", "-x", "B='q' \"r\"", "-x", "COHORT_TIMELINE_FILE=/tmp/$(x);y"},
                              program}));
}

TEST(LauncherArgv, TagOutputAndOutputDir) {
  EXPECT_EQ(plan({"-np", "2", "--tag-output", "--output-dir", "logs", "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "2"},
                  kFlags,
                  {"--tag-output", "--output-filename", "/work/here/logs"},
                  kDefaultExports,
                  {"/bin/true"}}));
  EXPECT_EQ(plan({"-np", "2", "--output-dir=/var/tmp/x", "/bin/true"}), join({{"/usr/bin/mpirun", "-np", "2"},
                                                                              kFlags,
                                                                              {"--output-filename", "/var/tmp/x"},
                                                                              kDefaultExports,
                                                                              {"/bin/true"}}));
}

TEST(LauncherArgv, EveryOptionTogether) {
  Context c = plain_context();
  c.root = true;
  c.env["LD_LIBRARY_PATH"] = "/l";
  EXPECT_EQ(
      plan({"-np",
            "6",
            "-H",
            "a:2,b:2",
            "--dry-run",
            "--tag-output",
            "--output-dir",
            "/o",
            "--nccl-debug",
            "WARN",
            "--env",
            "K=v w",
            "--mpi-args",
            "-map-by node",
            "--cycle-time-ms=5",
            "--mpirun",
            "/usr/bin/mpirun",
            "--",
            "/bin/echo",
            "x y"},
           c),
      join({{"/usr/bin/mpirun", "-np", "6", "-H", "a:2,b:2", "--allow-run-as-root", "--oversubscribe", "-bind-to",
             "none", "-mca", "pml", "ob1", "-mca", "btl", "self,vader,tcp", "-mca", "orte_base_help_aggregate", "0"},
            kKeepalive,
            {"-mca", "mpi_yield_when_idle", "1", "--tag-output", "--output-filename", "/o"},
            {"-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "OMP_WAIT_POLICY=PASSIVE", "-x", "COHORT_PROGRESS=plain",
             "-x", "NCCL_DEBUG=WARN", "-x", "K=v w", "-x", "COHORT_CYCLE_TIME_MS=5"},
            {"-map-by", "node", "/bin/echo", "x y"}}));
}

TEST(LauncherArgv, RanksRunUnderTheRankMonitorUnlessAskedNotTo) {
  Context c = plain_context();
  c.monitor = "/opt/cohort/bin/cohortrun-monitor";
  EXPECT_EQ(plan({"-np", "2", "--mpi-args", "-mca btl_base_verbose 1", "--", "/bin/echo", "-x"}, c),
            join({{"/usr/bin/mpirun", "-np", "2"},
                  kFlags,
                  kDefaultExports,
                  {"-mca", "btl_base_verbose", "1", "/opt/cohort/bin/cohortrun-monitor", "--", "/bin/echo", "-x"}}));
  EXPECT_EQ(plan({"-np", "2", "--no-rank-monitor", "/bin/echo"}, c),
            join({{"/usr/bin/mpirun", "-np", "2"}, kFlags, kDefaultExports, {"/bin/echo"}}));
}

TEST(LauncherArgv, LinkTimeoutSetsOpenMpisKeepaliveUnlessOverriddenOrZero) {
  // About 2/3 of the timeout to notice a silent host, the rest for mpirun to end the job.
  EXPECT_EQ(plan({"-np", "2", "--link-timeout=60", "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "2"},
                  {"-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "self,vader,tcp", "-mca",
                   "orte_base_help_aggregate", "0"},
                  {"-mca", "oob_tcp_keepalive_time", "20", "-mca", "oob_tcp_keepalive_intvl", "6", "-mca",
                   "oob_tcp_keepalive_probes", "3"},
                  kDefaultExports,
                  {"/bin/true"}}));
  for (int timeout : {10, 30, 45, 600}) {
    const LinkWatch w = link_watch(timeout);
    EXPECT_LE(w.detect_s(), timeout * 2 / 3) << timeout;
    EXPECT_GE(w.end_s(), timeout / 3) << timeout;
    EXPECT_EQ(job_options(parse_command_line({"-np", "2", "--link-timeout", std::to_string(timeout), "x"}), Plan{})
                  .lost_host_end_s,
              w.end_s());
    // cohortrun's own watch calls a host lost an interval after mpirun would have, and
    // leaves at least one interval for the job to end.
    EXPECT_EQ(w.silence_s(), w.detect_s() + w.interval_s) << timeout;
    EXPECT_GE(w.timeout_s - w.silence_s(), w.interval_s) << timeout;
  }
  EXPECT_EQ(job_options(parse_command_line({"-np", "2", "x"}), Plan{}).lost_host_end_s, link_watch(30).end_s());
  // An -mca of --mpi-args wins; 0 leaves Open MPI's own settings, and no limit on ending.
  EXPECT_EQ(plan({"-np", "2", "--mpi-args", "-mca oob_tcp_keepalive_time 99", "/bin/true"}),
            join({{"/usr/bin/mpirun", "-np", "2"},
                  {"-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "self,vader,tcp", "-mca",
                   "orte_base_help_aggregate", "0", "-mca", "oob_tcp_keepalive_intvl", "3", "-mca",
                   "oob_tcp_keepalive_probes", "3"},
                  kDefaultExports,
                  {"-mca", "oob_tcp_keepalive_time", "99", "/bin/true"}}));
  const Request off = parse_command_line({"-np", "2", "--link-timeout", "0", "/bin/true"});
  EXPECT_EQ(build_plan(off, 2, plain_context()).argv,
            join({{"/usr/bin/mpirun", "-np", "2"},
                  {"-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "self,vader,tcp", "-mca",
                   "orte_base_help_aggregate", "0"},
                  kDefaultExports,
                  {"/bin/true"}}));
  EXPECT_EQ(job_options(off, Plan{}).lost_host_end_s, 0);
}

TEST(LauncherArgv, RanksOnHostsGivenWatchTheirLinkToCohortrunThroughTheMonitor) {
  Context c = plain_context();
  c.monitor = "/opt/cohort/bin/cohortrun-monitor";
  const Argv hosts = {"-np", "2", "-H", "a:1,b:1"};
  const auto watched = [&](Argv args, const Context& context) {
    args.insert(args.begin(), hosts.begin(), hosts.end());
    args.push_back("/bin/true");
    const Request request = parse_command_line(args);
    const Plan p = build_plan(request, 2, context);
    const JobOptions options = job_options(request, p);
    EXPECT_EQ(p.link_watch, options.link_watch.has_value());
    // By name only: the value (with its token) is never on a command line.
    const bool exported =
        std::search(p.argv.begin(), p.argv.end(), kWatchExport.begin(), kWatchExport.end()) != p.argv.end();
    EXPECT_EQ(p.link_watch, exported);
    return p.link_watch;
  };
  EXPECT_TRUE(watched({}, c));
  const Request r20 = parse_command_line(join({hosts, {"--link-timeout=20", "/bin/true"}}));
  EXPECT_EQ(job_options(r20, build_plan(r20, 2, c)).link_watch->timeout_s, 20);
  EXPECT_FALSE(watched({"--link-timeout=0"}, c)) << "Open MPI's own settings, nothing of cohortrun's";
  EXPECT_FALSE(watched({"--no-rank-monitor"}, c)) << "no monitor to beat";
  EXPECT_FALSE(watched({"--dry-run"}, c)) << "a line to paste, with no cohortrun to listen";
  EXPECT_FALSE(watched({}, plain_context())) << "no cohortrun-monitor installed";
  EXPECT_FALSE(build_plan(parse_command_line({"-np", "2", "/bin/true"}), 2, c).link_watch) << "one host";
  EXPECT_EQ(build_plan(parse_command_line(join({hosts, {"/bin/true"}})), 2, c).argv,
            join({{"/usr/bin/mpirun", "-np", "2", "-H", "a:1,b:1"},
                  kFlags,
                  kDefaultExports,
                  kWatchExport,
                  {"/opt/cohort/bin/cohortrun-monitor", "--", "/bin/true"}}));
}

TEST(LauncherArgv, DryRunLineIsShellQuoted) {
  EXPECT_EQ(shell_join({"/usr/bin/mpirun", "-x", "A=x y;$(z)", "it's", "", "plain-word_1.2,3:4"}),
            "/usr/bin/mpirun -x 'A=x y;$(z)' 'it'\\''s' '' plain-word_1.2,3:4");
}

TEST(LauncherArgv, MpiArgsAreSplitLikeAShellWithoutExpansion) {
  EXPECT_EQ(split_words("  -mca btl 'self, vader' \"a \\\"b\\\"\" c\\ d $(x) ;", "--mpi-args"),
            (Argv{"-mca", "btl", "self, vader", "a \"b\"", "c d", "$(x)", ";"}));
  EXPECT_THROW(split_words("-mca 'open", "--mpi-args"), UsageError);
}

}  // namespace
}  // namespace cohortrun
