// Which rank writes a run's log (train/run_log.h): rank 0 opens the files the options
// name, every other rank none.
#include "train/run_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/config.h"
#include "support/temp_dir.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;

Config log_config(const fs::path& dir) {
  Config c;
  c.set("tensorboard_dir", (dir / "tb").string());
  c.set("log_csv", (dir / "steps.csv").string());
  return c;
}

TEST(RunLog, OnlyRankZeroOpensTheFiles) {
  testing::TempDir dir;
  EXPECT_EQ(open_run_log(log_config(dir.path()), 1), nullptr);
  EXPECT_EQ(open_run_log(log_config(dir.path()), 3), nullptr);
  EXPECT_FALSE(fs::exists(dir.path() / "tb"));
  EXPECT_FALSE(fs::exists(dir.path() / "steps.csv"));
  std::unique_ptr<RunLog> log = open_run_log(log_config(dir.path()), 0);
  ASSERT_NE(log, nullptr);
  log->step({1, 0.5, 2.0, 0.1, 0.25, 0.0, 0.0, 64});
  EXPECT_TRUE(fs::is_regular_file(log->event_file()));
  EXPECT_EQ(fs::path(log->event_file()).parent_path(), dir.path() / "tb");
  std::ifstream csv(dir.path() / "steps.csv");
  std::string header, line;
  std::getline(csv, header);
  std::getline(csv, line);
  EXPECT_EQ(header.rfind("step,epoch,loss,lr,", 0), 0u) << header;
  EXPECT_EQ(line.rfind("1,", 0), 0u) << line;
}

TEST(RunLog, NoOptionsNoFiles) {
  testing::TempDir dir;
  std::unique_ptr<RunLog> log = open_run_log(Config{}, 0);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->event_file(), "");
  log->step({1, 0, 1, 0.1, 0.1, 0, 0, 1});  // records nothing, fails nothing
}

}  // namespace
}  // namespace cohort::train
