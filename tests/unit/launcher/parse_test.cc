// cohortrun's bad-input errors, host lists, failure reports and sweep tables.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "command_line.h"
#include "failure.h"
#include "hosts.h"
#include "json.h"
#include "plan.h"
#include "rank_monitor.h"
#include "sweep.h"
#include "text.h"

namespace cohortrun {
namespace {

using Argv = std::vector<std::string>;

// The UsageError message of parsing and planning `args`, or "" when they are fine.
std::string error_of(const Argv& args, Context context = {}) {
  if (context.env.empty()) context.env = {{"PATH", "/usr/bin:/bin"}};
  if (context.cwd.empty()) context.cwd = "/";
  try {
    const Request r = parse_command_line(args);
    if (r.mode == Mode::kRun) build_plan(r, r.np, context);
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

void expect_error(const Argv& args, const std::string& part, const Context& context = {}) {
  const std::string message = error_of(args, context);
  EXPECT_NE(message.find(part), std::string::npos) << "args: " << shell_join(args) << "\nmessage: " << message;
}

TEST(LauncherInput, RankCountMustBeAtLeastOne) {
  expect_error({"-np", "0", "/bin/true"}, "-np 0: the number of ranks must be at least 1");
  expect_error({"-np", "-3", "/bin/true"}, "must be at least 1");
  expect_error({"-np", "two", "/bin/true"}, "-np two: the number of ranks must be an integer");
  expect_error({"/bin/true"}, "missing -np N");
  expect_error({"-np"}, "-np needs a value");
  expect_error({"-np", "2", "-np", "3", "/bin/true"}, "-np is given twice");
}

TEST(LauncherInput, UnknownProgramIsNamed) {
  expect_error({"-np", "2", "no-such-program-here"}, "program 'no-such-program-here' was not found on PATH");
  expect_error({"-np", "2", "/no/such/file"}, "program '/no/such/file' does not exist");
  const std::string plain = testing::TempDir() + "/cohortrun_not_executable";
  std::ofstream(plain) << "#!/bin/sh\n";
  chmod(plain.c_str(), 0644);
  expect_error({"-np", "2", plain}, "is not executable");
  std::remove(plain.c_str());
  expect_error({"-np", "2", "/tmp"}, "is a directory");
  expect_error({"-np", "2"}, "no program to run");
  expect_error({"-np", "2", "--"}, "no program to run");
}

TEST(LauncherInput, MissingMpirunIsNamed) {
  Context c;
  c.env = {{"PATH", "/nonexistent"}};
  expect_error({"-np", "2", "/bin/true"}, "mpirun was not found on PATH (/nonexistent)", c);
  expect_error({"-np", "2", "--mpirun", "/no/mpirun", "/bin/true"}, "--mpirun /no/mpirun: not found");
}

TEST(LauncherInput, MalformedHostListsAreRejected) {
  expect_error({"-np", "2", "-H", "", "/bin/true"}, "the host list is empty");
  expect_error({"-np", "2", "-H", "a:2,,b", "/bin/true"}, "empty entry");
  expect_error({"-np", "2", "-H", "a:0", "/bin/true"}, "slot count '0' of host 'a' is not a positive integer");
  expect_error({"-np", "2", "-H", "a:x", "/bin/true"}, "slot count 'x'");
  expect_error({"-np", "2", "-H", "a:2:3", "/bin/true"}, "slot count '2:3'");
  expect_error({"-np", "2", "-H", "bad host", "/bin/true"}, "'bad host' is not a host name");
  expect_error({"-np", "2", "-H", "a,", "/bin/true"}, "empty entry");
  expect_error({"-np", "2", "--hostfile", "/no/such/hostfile", "/bin/true"},
               "--hostfile /no/such/hostfile: cannot be read");
  EXPECT_THROW(parse_hostfile_text("n1 slots=two\n", "hf"), UsageError);
  EXPECT_THROW(parse_hostfile_text("n1 cpus=2\n", "hf"), UsageError);
  EXPECT_THROW(parse_hostfile_text("# nothing\n", "hf"), UsageError);
  try {
    parse_hostfile_text("n1\nn2 slots=0\n", "hf");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("hf:2:"), std::string::npos) << e.what();
  }
}

TEST(LauncherInput, HostListsCountSlots) {
  EXPECT_EQ(total_slots(parse_host_list("n1:4,n2:4")), 8);
  EXPECT_EQ(total_slots(parse_host_list("n1,n2:3,10.0.0.7")), 5);
  EXPECT_EQ(total_slots(parse_hostfile_text("n1 slots=2\nn2 max_slots=9\n", "hf")), 3);
}

TEST(LauncherInput, ConflictingOptionsAreRejected) {
  expect_error({"-np", "2", "-H", "a", "--hostfile", "f", "/bin/true"}, "-H and --hostfile cannot be combined");
  expect_error({"-np", "2", "--batch_size", "8", "--env", "COHORT_BATCH_SIZE=9", "/bin/true"},
               "COHORT_BATCH_SIZE is given twice with different values");
  expect_error({"-np", "2", "--nccl-debug", "INFO", "--env", "NCCL_DEBUG=WARN", "/bin/true"},
               "NCCL_DEBUG is given twice");
  expect_error({"-np", "2", "--mpi-args", "-np 4", "/bin/true"}, "'-np' conflicts with cohortrun's own options");
  expect_error({"-np", "2", "--mpi-args", "--host a,b", "/bin/true"}, "use cohortrun's -H or --hostfile");
  expect_error({"-np", "2", "--mpi-args", "--hostfile=f", "/bin/true"}, "conflicts");
  expect_error({"-np", "2", "--output-dir", "o", "--mpi-args", "--output-filename p", "/bin/true"}, "conflicts");
  expect_error({"--check-build", "-np", "2"}, "--check-build takes no other option");
  expect_error({"--check-build", "--version"}, "cannot be combined");
  expect_error({"sweep", "-np", "1,2", "--dry-run", "/bin/true"}, "--dry-run cannot be combined with sweep");
  expect_error({"-np", "2", "--sweep-out", "x", "/bin/true"}, "only for cohortrun sweep");
  // The same value twice is not a conflict.
  EXPECT_EQ(error_of({"-np", "2", "--batch_size", "8", "--env", "COHORT_BATCH_SIZE=8", "/bin/true"}), "");
}

TEST(LauncherInput, BadSettingsNameKeyValueAndWhatIsAllowed) {
  expect_error({"-np", "2", "--fusion_threshold_mb", "abc", "/bin/true"}, "--fusion_threshold_mb=abc");
  expect_error({"-np", "2", "--fusion_threshold_mb", "abc", "/bin/true"}, "[0, 65536]");
  expect_error({"-np", "2", "--precision=f64", "/bin/true"}, "f32|f16|bf16");
  expect_error({"-np", "2", "--fusion-treshold-mb=3", "/bin/true"}, "did you mean --fusion_threshold_mb?");
  expect_error({"-np", "2", "--dry-runn", "/bin/true"}, "did you mean --dry-run?");
  expect_error({"-np", "2", "-x", "A", "/bin/true"}, "unknown option '-x'");
  expect_error({"-np", "2", "--env", "1A=b", "/bin/true"}, "expected NAME=VALUE");
  expect_error({"-np", "2", "--env", "NOVALUE", "/bin/true"}, "expected NAME=VALUE");
  expect_error({"-np", "2", "--env", "COHORT_BATCH_SIZE=0", "/bin/true"}, "[1, 1048576]");
  expect_error({"-np", "2", "--nccl-debug", "LOUD", "/bin/true"}, "VERSION, WARN, INFO, TRACE, ABORT");
  expect_error({"-np", "2", "--dry-run=yes", "/bin/true"}, "--dry-run takes no value");
  expect_error({"-np", "2", "--no-batch-size", "/bin/true"}, "unknown option '--no-batch-size'");
  expect_error({"-np", "2", "--mpi-args", "-mca 'x", "/bin/true"}, "unterminated single quote");
  Context c;
  c.env = {{"PATH", "/usr/bin:/bin"}, {"COHORT_BATCH_SIZE", "0"}};
  expect_error({"-np", "2", "/bin/true"}, "environment variable COHORT_BATCH_SIZE=0", c);
}

TEST(LauncherInput, LinkTimeoutIsZeroOrAtLeastTenSeconds) {
  EXPECT_EQ(parse_command_line({"-np", "2", "/bin/true"}).link_timeout_s, 30);
  EXPECT_EQ(parse_command_line({"-np", "2", "--link-timeout", "0", "/bin/true"}).link_timeout_s, 0);
  EXPECT_EQ(parse_command_line({"-np", "2", "--link_timeout=120", "/bin/true"}).link_timeout_s, 120);
  expect_error({"-np", "2", "--link-timeout", "5", "/bin/true"},
               "--link-timeout 5: the number of seconds must be at least 10, or 0 for Open MPI's own settings");
  expect_error({"-np", "2", "--link-timeout=-1", "/bin/true"}, "--link-timeout -1: the number of seconds must be");
  expect_error({"-np", "2", "--link-timeout", "soon", "/bin/true"},
               "--link-timeout soon: the number of seconds must be an integer");
  expect_error({"-np", "2", "--link-timeuot=20", "/bin/true"}, "did you mean --link-timeout?");
}

TEST(LauncherInput, SpecialModes) {
  EXPECT_EQ(parse_command_line({"--check-build"}).mode, Mode::kCheckBuild);
  EXPECT_EQ(parse_command_line({"--help"}).mode, Mode::kHelp);
  EXPECT_EQ(parse_command_line({"-h"}).mode, Mode::kHelp);
  const Request sweep = parse_command_line({"sweep", "-np", "1,2,4", "--", "/bin/true"});
  EXPECT_EQ(sweep.mode, Mode::kSweep);
  EXPECT_EQ(sweep.sweep_sizes, (std::vector<int>{1, 2, 4}));
  expect_error({"sweep", "-np", "1,,2", "/bin/true"}, "must be an integer");
}

// Messages as Open MPI 4.1 prints them (with -mca orte_base_help_aggregate 0).
TEST(LauncherFailure, NamesTheRankThatExited) {
  const auto f = find_rank_failure(
      "bad\n------\nPrimary job  terminated normally, but 1 process returned\na non-zero exit code. Per "
      "user-direction, the job has been aborted.\n------\n------\nmpirun detected that one or more processes exited "
      "with non-zero status, thus causing\nthe job to be terminated. The first process to do so was:\n\n  Process "
      "name: [[29645,1],1]\n  Exit code:    3\n------\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->exit_code, 3);
  EXPECT_EQ(f->reason, "rank 1 exited with status 3");
}

TEST(LauncherFailure, NamesTheRankThatWasKilled) {
  const auto f = find_rank_failure(
      "------\nmpirun noticed that process rank 2 with PID 0 on node vm exited on signal 11 (Segmentation "
      "fault).\n------\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 2);
  EXPECT_EQ(f->signal, 11);
  EXPECT_EQ(f->node, "vm");
  EXPECT_EQ(f->reason, "rank 2 (on vm) was killed by SIGSEGV (Segmentation fault)");
}

// The rank monitor's line is read even when mpirun's own report is missing, also
// behind a --tag-output prefix; mpirun's MPI_Abort report still wins.
TEST(LauncherFailure, ReadsTheRankMonitorLine) {
  const std::string exited = rank_report(1, 4242, "node7", 3, 0);
  EXPECT_EQ(exited, "cohortrun: rank 1 (pid 4242 on node7) exited with status 3");
  auto f = find_rank_failure("[1,1]<stderr>:" + exited + "\n------\nPrimary job  terminated normally\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->exit_code, 3);
  EXPECT_EQ(f->reason, "rank 1 (on node7) exited with status 3");
  f = find_rank_failure(rank_report(2, 1, "vm", 0, 11) + "\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->signal, 11);
  EXPECT_EQ(f->reason, "rank 2 (on vm) was killed by SIGSEGV (Segmentation fault)");
  f = find_rank_failure(rank_report(0, 1, "vm", 7, 0) +
                        "\nMPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith errorcode 7.\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->abort_code, 7);
}

TEST(LauncherFailure, HugeOutputAroundTheReportIsHarmless) {
  std::string text(300000, ' ');
  text += "\n" + std::string(100000, 'x') + "\n";
  for (int i = 0; i < 2000; ++i) text += "step " + std::to_string(i) + "    loss 2.3\n";
  text += rank_report(3, 7, "h", 9, 0) + "\n";
  text += std::string(200000, '(') + "\n";
  const auto f = find_rank_failure(text);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 3);
}

TEST(LauncherFailure, NamesTheRankThatAborted) {
  const auto f = find_rank_failure(
      "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 7.\n\nNOTE: invoking MPI_ABORT");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->abort_code, 7);
  EXPECT_EQ(f->reason, "rank 1 called MPI_Abort on MPI_COMM_WORLD with error code 7");
  EXPECT_FALSE(find_rank_failure("all good\n"));
}

TEST(LauncherSweep, RecognisesSummaryLinesOnly) {
  EXPECT_TRUE(is_summary_line(R"({"schema": "cohort.run/1", "ranks": 2, "images_per_sec": {"median": 10}})"));
  EXPECT_FALSE(is_summary_line(R"({"schema": "cohort.run/2"})"));
  EXPECT_TRUE(is_summary_line(R"([1,0]<stdout>:{"schema": "cohort.run/1"})"));
  EXPECT_EQ(strip_output_tag(R"([1,0]<stdout>:{"a": 1})"), R"({"a": 1})");
  EXPECT_EQ(strip_output_tag("[not a tag] x"), "[not a tag] x");
  EXPECT_FALSE(is_summary_line(R"(step 10 images/sec: 5 "cohort.run/1")"));
  EXPECT_FALSE(is_summary_line(R"({"schema": "cohort.run/1", )"));
}

TEST(LauncherSweep, TableHasSpeedupAndEfficiency) {
  std::vector<SweepRow> rows(4);
  const char* lines[] = {
      R"({"schema": "cohort.run/1", "ranks": 1, "images_per_sec": {"median": 100.0, "mean": 99}, "top1": null})",
      R"({"schema": "cohort.run/1", "ranks": 2, "images_per_sec": {"median": 190, "mean": 1.9e2}})",
      R"({"schema": "cohort.run/1", "ranks": 4, "images_per_sec": {"median": 360}, "model": "a \"b\" \u00e9"})",
      R"({"schema": "cohort.run/1", "ranks": 8})"};
  const int ranks[] = {1, 2, 4, 8};
  for (int i = 0; i < 4; ++i) {
    rows[i].ranks = ranks[i];
    read_summary(rows[i], lines[i]);
  }
  compute_scaling(rows);
  EXPECT_DOUBLE_EQ(*rows[1].speedup, 1.9);
  EXPECT_DOUBLE_EQ(*rows[1].efficiency, 0.95);
  EXPECT_DOUBLE_EQ(*rows[2].efficiency, 0.9);
  EXPECT_FALSE(rows[3].images_per_sec);
  EXPECT_EQ(rows[3].error, "the summary has no images_per_sec.median");
  EXPECT_EQ(sweep_csv(rows),
            "ranks,images_per_sec,speedup,efficiency,exit_status,status,loss,top1\n1,100.000,1.0000,1.0000,0,ok,,\n"
            "2,190.000,1.9000,0.9500,0,ok,,\n4,360.000,3.6000,0.9000,0,ok,,\n8,,,,0,failed,,\n");
  EXPECT_NE(sweep_table(rows).find("    2       190.0     1.90x       95.0%"), std::string::npos) << sweep_table(rows);
  // The JSON file reads back, with each run's summary embedded.
  const Json doc = parse_json(sweep_json(rows, {"prog", "a \"b\""}));
  EXPECT_EQ(std::get<std::string>(doc.get("schema")->value), "cohort.sweep/1");
  const auto& runs = *std::get<std::shared_ptr<Json::Array>>(doc.get("runs")->value);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_DOUBLE_EQ(runs[2].get("summary")->get("images_per_sec")->get("median")->number(), 360);
  EXPECT_TRUE(std::holds_alternative<std::nullptr_t>(runs[3].get("speedup")->value));
}

TEST(LauncherSweep, OverTakesTheCrossProductOfRegistrySettings) {
  const Request r = parse_command_line({"sweep", "-np", "1,2", "--over", "batch-size=32,64", "--over",
                                        "variable_update=replicated,async_parameter_server", "--", "/bin/true", "-x"});
  ASSERT_EQ(r.sweep_over.size(), 2u);
  EXPECT_EQ(r.sweep_over[0].key, "batch_size");
  EXPECT_EQ(r.sweep_over[0].values, (std::vector<std::string>{"32", "64"}));
  const std::vector<SweepRow> rows = sweep_points(r.sweep_sizes, r.sweep_over);
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_EQ(rows[0].ranks, 1);
  EXPECT_EQ(rows[1].ranks, 2);
  EXPECT_EQ(rows[1].settings, (std::vector<std::pair<std::string, std::string>>{{"batch_size", "32"},
                                                                                {"variable_update", "replicated"}}));
  EXPECT_EQ(rows[7].settings, (std::vector<std::pair<std::string, std::string>>{
                                  {"batch_size", "64"}, {"variable_update", "async_parameter_server"}}));
  // Values are checked like any setting, and a swept key is given one way only.
  expect_error({"sweep", "-np", "1", "--over", "batch_size=32,abc", "/bin/true"}, "abc");
  expect_error({"sweep", "-np", "1", "--over", "batch_size=", "/bin/true"}, "expected KEY=VALUE1,VALUE2");
  expect_error({"sweep", "-np", "1", "--over", "batch_sise=1", "/bin/true"}, "did you mean --batch_size?");
  expect_error({"sweep", "-np", "1", "--over", "batch_size=1,,2", "/bin/true"}, "an empty value");
  expect_error({"sweep", "-np", "1", "--over", "batch_size=1", "--over", "batch_size=2", "/bin/true"},
               "batch_size is swept twice");
  expect_error({"sweep", "-np", "1", "--over", "batch_size=1", "--batch_size=4", "/bin/true"},
               "also given by --batch_size=4");
  expect_error({"sweep", "-np", "1", "--over", "batch_size=1", "--", "/bin/prog", "--batch-size=4"},
               "the program's argument --batch-size=4 would override the swept batch_size");
  expect_error({"-np", "1", "--over", "batch_size=1", "/bin/true"}, "--over is only for cohortrun sweep");
}

TEST(LauncherSweep, EachSettingScalesAgainstItsOwnSmallestSizeAndFailuresAreRows) {
  std::vector<SweepRow> rows = sweep_points({1, 2}, {{"batch_size", {"32", "a,b"}}});
  rows[0].images_per_sec = 100;
  rows[1].images_per_sec = 180;
  rows[2].images_per_sec = 150;
  rows[3].exit_status = 3;
  rows[3].error = "the job failed with exit status 3";
  compute_scaling(rows);
  EXPECT_DOUBLE_EQ(*rows[1].speedup, 1.8);
  EXPECT_DOUBLE_EQ(*rows[2].speedup, 1.0);
  EXPECT_FALSE(rows[3].speedup);
  EXPECT_EQ(sweep_csv(rows),
            "ranks,batch_size,images_per_sec,speedup,efficiency,exit_status,status,loss,top1\n"
            "1,32,100.000,1.0000,1.0000,0,ok,,\n2,32,180.000,1.8000,0.9000,0,ok,,\n"
            "1,\"a,b\",150.000,1.0000,1.0000,0,ok,,\n2,\"a,b\",,,,3,failed,,\n");
  const std::string table = sweep_table(rows);
  EXPECT_NE(table.find("ranks  batch_size  images/sec"), std::string::npos) << table;
  EXPECT_NE(table.find("    2  a,b                  -         -           -  (failed: the job failed"),
            std::string::npos)
      << table;
  const Json doc = parse_json(sweep_json(rows, {"prog"}));
  const auto& runs = *std::get<std::shared_ptr<Json::Array>>(doc.get("runs")->value);
  EXPECT_EQ(std::get<std::string>(runs[2].get("settings")->get("batch_size")->value), "a,b");
  EXPECT_EQ(std::get<std::string>(runs[3].get("status")->value), "failed");
}

TEST(LauncherSweep, ScalingIsAgainstTheSmallestSizeThatWorked) {
  std::vector<SweepRow> rows(2);
  rows[0].ranks = 2;
  rows[0].images_per_sec = 200;
  rows[1].ranks = 4;
  rows[1].images_per_sec = 300;
  compute_scaling(rows);
  EXPECT_DOUBLE_EQ(*rows[1].speedup, 1.5);
  EXPECT_DOUBLE_EQ(*rows[1].efficiency, 0.75);
}

TEST(LauncherJson, RejectsMalformedText) {
  EXPECT_THROW(parse_json("{\"a\": }"), std::runtime_error);
  EXPECT_THROW(parse_json("[1, 2"), std::runtime_error);
  EXPECT_THROW(parse_json("\"abc"), std::runtime_error);
  EXPECT_THROW(parse_json("{} x"), std::runtime_error);
  EXPECT_EQ(std::get<std::string>(parse_json(json_quote("a\"b\\c\n\x01")).value), "a\"b\\c\n\x01");
}

}  // namespace
}  // namespace cohortrun
