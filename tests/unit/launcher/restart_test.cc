// cohortrun's restarts: their options, the host a failure points at, where the next
// attempt runs, and what it exports; and mpirun's report of a lost host.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "command_line.h"
#include "failure.h"
#include "hosts.h"
#include "restart.h"
#include "text.h"

namespace cohortrun {
namespace {

using Argv = std::vector<std::string>;

std::string parse_error(const Argv& args) {
  try {
    parse_command_line(args);
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

bool never_local(const std::string&) { return false; }

TEST(LauncherRestart, OptionsAreParsedAndChecked) {
  const Request r = parse_command_line(
      {"-np", "4", "-H", "a:2,b:2", "--max-restarts=3", "--exclude-failed-hosts", "--min-np", "2", "prog"});
  EXPECT_EQ(r.max_restarts, 3);
  EXPECT_TRUE(r.exclude_failed_hosts);
  EXPECT_EQ(r.min_np, 2);
  EXPECT_EQ(parse_command_line({"-np", "2", "prog"}).max_restarts, 0);

  EXPECT_NE(parse_error({"-np", "2", "--max-restarts=-1", "prog"})
                .find("--max-restarts -1: the number of restarts "
                      "must be at least 0"),
            std::string::npos);
  EXPECT_NE(parse_error({"-np", "2", "--max-restarts=x", "prog"}).find("must be an integer"), std::string::npos);
  EXPECT_NE(parse_error({"-np", "2", "-H", "a:2", "--exclude-failed-hosts", "prog"}).find("needs --max-restarts"),
            std::string::npos);
  EXPECT_NE(parse_error({"-np", "2", "--max-restarts=1", "--exclude-failed-hosts", "prog"}).find("needs the hosts"),
            std::string::npos);
  EXPECT_NE(parse_error({"-np", "2", "--min-np=1", "prog"}).find("--min-np is for --exclude-failed-hosts"),
            std::string::npos);
  EXPECT_NE(parse_error({"-np", "2", "-H", "a:2", "--max-restarts=1", "--exclude-failed-hosts", "--min-np=3", "prog"})
                .find("--min-np 3 is more than -np 2"),
            std::string::npos);
  EXPECT_NE(parse_error({"sweep", "-np", "1,2", "--max-restarts=1", "prog"}).find("cannot be combined with sweep"),
            std::string::npos);
}

TEST(LauncherRestart, TheFailedHostIsFoundByNameRankOrDaemon) {
  const std::vector<Host> hosts = parse_host_list("10.0.0.1:2,10.0.0.2:2,node3.example.org:2");
  RankFailure by_name;
  by_name.rank = 0;
  by_name.node = "node3";  // the rank monitor's short host name
  EXPECT_EQ(failed_host(hosts, 6, true, by_name, never_local), 2);

  RankFailure by_rank;
  by_rank.node = "h2";  // a host name that is not in the list: the rank decides
  for (int rank : {0, 1, 2, 3, 4, 5}) {
    by_rank.rank = rank;
    EXPECT_EQ(failed_host(hosts, 6, true, by_rank, never_local), rank / 2) << "rank " << rank;
  }
  EXPECT_EQ(failed_host(hosts, 6, false, by_rank, never_local), -1) << "ranks placed another way";
  by_rank.rank = 3;
  EXPECT_EQ(failed_host(hosts, 8, true, by_rank, never_local), -1) << "oversubscribed";

  RankFailure lost;
  lost.daemon = 1;
  lost.node = "h2";
  auto first_is_local = [](const std::string& h) { return h == "10.0.0.1"; };
  EXPECT_EQ(failed_host(hosts, 6, true, lost, first_is_local), 1);
  lost.daemon = 2;
  EXPECT_EQ(failed_host(hosts, 6, true, lost, first_is_local), 2);
  EXPECT_EQ(failed_host(hosts, 6, true, lost, never_local), 1) << "mpirun on none of the hosts";
  EXPECT_EQ(failed_host({}, 6, true, lost, never_local), -1);

  // cohortrun's watch names the host as its ranks' monitors did, and a rank that ran there.
  RankFailure watched;
  watched.node = "h2";
  watched.lost_rank = 5;
  EXPECT_EQ(failed_host(hosts, 6, true, watched, never_local), 2);
  watched.node = "node3";
  watched.lost_rank = 0;
  EXPECT_EQ(failed_host(hosts, 6, true, watched, never_local), 2) << "the name wins";
  watched.node = "h2";
  watched.address = "10.0.0.2";
  EXPECT_EQ(failed_host(hosts, 6, false, watched, never_local), 1) << "then the address";
}

TEST(LauncherRestart, RanksOnAHost) {
  const std::vector<Host> hosts = parse_host_list("a:2,b:1,c:4");
  EXPECT_EQ(ranks_on_host(hosts, 7, 0), "ranks 0-1");
  EXPECT_EQ(ranks_on_host(hosts, 7, 1), "rank 2");
  EXPECT_EQ(ranks_on_host(hosts, 5, 2), "ranks 3-4");
  EXPECT_EQ(ranks_on_host(hosts, 3, 2), "");
  EXPECT_EQ(ranks_on_host(hosts, 7, 3), "");
  EXPECT_EQ(ranks_on_host(hosts, 7, -1), "");
}

TEST(LauncherRestart, AFailedHostIsLeftOutOnlyWhenTheOthersHaveEnoughSlots) {
  const Attempt four{4, parse_host_list("a:2,b:2,c:1")};
  RestartPlan p = plan_restart(four, true, 0, 2);
  EXPECT_EQ(p.dropped, "c");
  EXPECT_EQ(p.next.np, 4);
  EXPECT_EQ(host_list_text(p.next.hosts), "a:2,b:2");

  p = plan_restart(four, true, 0, 0);  // b and c give 3 slots, -np is 4
  EXPECT_EQ(p.dropped, "");
  EXPECT_NE(p.kept.find("3 slots, fewer than the 4 ranks"), std::string::npos) << p.kept;
  EXPECT_EQ(host_list_text(p.next.hosts), "a:2,b:2,c:1");

  p = plan_restart(four, true, 2, 0);  // --min-np 2 allows 3 ranks
  EXPECT_EQ(p.dropped, "a");
  EXPECT_EQ(p.next.np, 3);
  EXPECT_EQ(host_list_text(p.next.hosts), "b:2,c:1");

  p = plan_restart({2, parse_host_list("a:1,b:1")}, true, 1, 1);
  EXPECT_EQ(p.dropped, "b");
  EXPECT_EQ(p.next.np, 1);

  p = plan_restart({1, parse_host_list("a:1")}, true, 1, 0);
  EXPECT_EQ(p.dropped, "");
  EXPECT_NE(p.kept.find("0 slots"), std::string::npos) << p.kept;

  p = plan_restart(four, true, 0, -1);
  EXPECT_NE(p.kept.find("does not say which host"), std::string::npos) << p.kept;
  p = plan_restart(four, false, 0, 2);
  EXPECT_EQ(p.dropped, "");
  EXPECT_EQ(p.kept, "");
  EXPECT_EQ(p.next.np, 4);
}

TEST(LauncherRestart, RestartsResumeOnTheirHostsWithTheirOwnOutputFolder) {
  const Request r = parse_command_line({"-np", "4", "-H", "a:2,b:2", "--max-restarts=2", "--exclude-failed-hosts",
                                        "--min-np=2", "--output-dir", "out", "prog", "--checkpoint_dir=ck"});
  const Attempt first = first_attempt(r);
  EXPECT_EQ(first.np, 4);
  EXPECT_EQ(host_list_text(first.hosts), "a:2,b:2");

  Request same = attempt_request(r, first, 0);
  EXPECT_EQ(same.host_list, "a:2,b:2");
  EXPECT_EQ(same.output_dir, "out");
  EXPECT_TRUE(same.exports.empty());

  Request next = attempt_request(r, {2, parse_host_list("a:2")}, 1);
  EXPECT_EQ(next.np, 2);
  EXPECT_EQ(next.host_list, "a:2");
  EXPECT_EQ(next.output_dir, "out/restart.1");
  ASSERT_EQ(next.exports.size(), 1u);
  EXPECT_EQ(next.exports[0].name, "COHORT_RESUME");
  EXPECT_EQ(next.exports[0].value, "true");

  const Request told = parse_command_line({"-np", "2", "--max-restarts=1", "--no-resume", "prog"});
  const Request kept = attempt_request(told, first_attempt(told), 1);
  ASSERT_EQ(kept.exports.size(), 1u) << "the command line's resume setting stays";
  EXPECT_EQ(kept.exports[0].value, "false");
}

TEST(LauncherFailure, NamesTheHostWhoseDaemonWasLost) {
  const std::string text =
      "--------------------------------------------------------------------------\n"
      "ORTE has lost communication with a remote daemon.\n\n"
      "  HNP daemon   : [[4711,0],0] on node h1\n"
      "  Remote daemon: [[4711,0],1] on node h2\n\n"
      "This is usually due to either a failure of the TCP network\n"
      "connection to the node, or possibly an internal failure of\n"
      "the daemon itself. We cannot recover from this failure, and\n"
      "therefore will terminate the job.\n"
      "--------------------------------------------------------------------------\n"
      "mpirun noticed that process rank 0 with PID 0 on node h1 exited on signal 9 (Killed).\n";
  const auto f = find_rank_failure(text);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->daemon, 1);
  EXPECT_EQ(f->rank, -1);
  EXPECT_EQ(f->node, "h2");
  EXPECT_EQ(f->reason, "mpirun lost its connection to host h2 (a link down or the host gone)");
}

TEST(LauncherFailure, NumbersTooLargeForAnIntDoNotThrow) {
  const auto f = find_rank_failure("cohortrun: rank 99999999999999999999 (pid 1 on h) exited with status 3\n");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->rank, 2147483647);
  EXPECT_EQ(f->exit_code, 3);
}

}  // namespace
}  // namespace cohortrun
