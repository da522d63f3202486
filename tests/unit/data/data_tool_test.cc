// cohort-data pack / inspect / verify, run as a program on data made here.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "data/file.h"
#include "core/config.h"
#include "data/pipeline.h"
#include "data/source.h"
#include "data_test_util.h"

namespace cohort::data {
namespace {

struct ToolRun {
  int status;
  std::string output;
};

ToolRun run(const std::string& args) {
  std::string cmd = std::string(COHORT_DATA_TOOL) + " " + args + " 2>&1";
  ToolRun r{-1, ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) r.output += buf;
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(DataTool, BenchRunsThePipelineAloneAtEachThreadCount) {
  testing::TempDir dir;
  for (int i = 0; i < 12; ++i)
    testing::put_image(dir.path, i % 2 ? "a" : "b", std::to_string(i) + ".jpg", testing::rgb_jpeg(96, 64, i));
  ToolRun bench = run("bench " + dir.path + " --max-threads 2 --batches 2 --batch_size=4 --image_size=32");
  ASSERT_EQ(bench.status, 0) << bench.output;
  EXPECT_NE(bench.output.find("threads   images/sec     read   decode  augment assemble    total      MB/s"),
            std::string::npos)
      << bench.output;
  // One row per thread count: the rate, four stages and their total, the read rate, the
  // limiting stage.
  for (const char* threads : {"\n1 ", "\n2 "}) {
    const size_t at = bench.output.find(threads);
    ASSERT_NE(at, std::string::npos) << bench.output;
    std::istringstream row(bench.output.substr(at + 1, bench.output.find('\n', at + 1) - at - 1));
    int t = 0;
    double rate = 0, read = 0, decode = 0, augment = 0, assemble = 0, total = 0, mb = 0;
    std::string stage;
    row >> t >> rate >> read >> decode >> augment >> assemble >> total >> mb >> stage;
    EXPECT_GT(rate, 0) << bench.output;
    EXPECT_GT(decode, 0) << bench.output;
    EXPECT_NEAR(read + decode + augment + assemble, total, 0.0021) << bench.output;  // printed to 0.001
    EXPECT_GT(mb, 0) << bench.output;
    EXPECT_TRUE(stage == "read" || stage == "decode" || stage == "augment" || stage == "assemble") << bench.output;
  }
  EXPECT_EQ(run("bench " + dir.path + " --max-threads 0").status, 2);
  ToolRun missing = run("bench " + dir.path + "/none --max-threads 1");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.output.find(dir.path + "/none"), std::string::npos) << missing.output;
}

TEST(DataTool, PacksInspectsAndVerifies) {
  testing::TempDir dir;
  std::string images = dir / "images";
  int n = 0;
  for (const char* cls : {"cat", "dog", "emu"}) {
    std::filesystem::create_directories(images + "/" + cls);
    for (int i = 0; i < 3; ++i) {
      auto j = testing::rgb_jpeg(40 + i, 30, n++);
      write_file(images + "/" + cls + "/" + std::to_string(i) + ".jpg", j.data(), j.size());
    }
  }
  write_file(images + "/dog/broken.jpg", "not a jpeg", 10);
  std::string out = dir / "shards";
  ToolRun pack = run("pack " + images + " " + out + " --shards 2");
  ASSERT_EQ(pack.status, 0) << pack.output;
  EXPECT_NE(pack.output.find("broken.jpg"), std::string::npos) << pack.output;
  EXPECT_NE(pack.output.find("packed 9 images of 3 classes into 2 shards"), std::string::npos) << pack.output;
  EXPECT_TRUE(is_regular_file(out + "/train-00000-of-00002"));
  EXPECT_TRUE(is_regular_file(out + "/train-00001-of-00002.idx"));
  SourceOptions o;
  o.path = out;
  auto src = open_source(o);
  EXPECT_EQ(src->size(), 9);
  {
    // The packed shards feed the pipeline: every image once, labels from the folders.
    Config c;
    c.set("data_dir", out);
    c.set("batch_size", "4");
    c.set("image_size", "24");
    auto po = pipeline_options(c, 0, 1, 2);
    Pipeline p(po, src);
    std::multiset<int32_t> labels;
    for (int64_t s = 0; s < p.steps_per_epoch(); ++s) {
      const BatchView& b = p.next();
      for (int64_t i = 0; i < b.valid; ++i) labels.insert(b.labels.data_as<int32_t>()[i]);
    }
    EXPECT_EQ(labels, (std::multiset<int32_t>{0, 0, 0, 1, 1, 1, 2, 2, 2}));
  }

  ToolRun inspect = run("inspect " + out + " --limit 3");
  ASSERT_EQ(inspect.status, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("samples: 9"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("40x30x3"), std::string::npos) << inspect.output;
  ToolRun folder = run("inspect " + images);
  EXPECT_NE(folder.output.find("classes: 3 (0=cat, 1=dog, 2=emu)"), std::string::npos) << folder.output;

  ToolRun ok = run("verify " + out);
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("0 are broken"), std::string::npos) << ok.output;
  // Flip a byte inside the first record's payload: its CRC no longer matches.
  std::string shard = out + "/train-00000-of-00002";
  auto bytes = read_file(shard);
  bytes[40] ^= 0x55;
  write_file(shard, bytes.data(), bytes.size());
  ToolRun bad = run("verify " + out);
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_NE(bad.output.find("BROKEN '" + shard + "' offset 0"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("CRC"), std::string::npos) << bad.output;

  EXPECT_EQ(run("frobnicate").status, 2);
  EXPECT_EQ(run("inspect /nonexistent/x").status, 2);
}

TEST(DataTool, VerifyDecodesEveryImageToItsEndAndReportsWarnings) {
  testing::TempDir dir;
  std::string images = dir / "images";
  testing::put_image(images, "a", "good.jpg", testing::rgb_jpeg(40, 30, 1));
  auto bad = testing::flipped_bit_jpeg();  // damage below the rows a crop of the top would read
  ASSERT_FALSE(bad.empty());
  testing::put_image(images, "a", "flipped.jpg", bad);
  auto odd = testing::rgb_jpeg(40, 30, 2);
  odd[11] = 3;  // JFIF major version 3: a warning about metadata only
  testing::put_image(images, "b", "odd.jpg", odd);
  ToolRun r = run("verify " + images);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("BROKEN '" + images + "/a/flipped.jpg': bad JPEG: Corrupt JPEG data"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("WARNING '" + images + "/b/odd.jpg': Warning: unknown JFIF revision number 3.01"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("checked 3 samples: 1 is broken"), std::string::npos) << r.output;

  // A stale index is reported (and rebuilt in memory: every record is checked).
  std::string out = dir / "shards";
  ASSERT_EQ(run("pack " + images + " " + out).status, 0);
  std::string index = out + "/train-00000-of-00001.idx";
  auto text = read_file(index);
  std::string lines(text.begin(), text.end());
  lines = lines.substr(0, lines.find('\n') + 1);  // only the first record
  write_file(index, lines.data(), lines.size());
  ToolRun stale = run("verify " + out);
  EXPECT_EQ(stale.status, 1) << stale.output;
  EXPECT_NE(stale.output.find("BROKEN index '" + index + "' does not match its shard"), std::string::npos)
      << stale.output;
  EXPECT_NE(stale.output.find("checked 2 samples"), std::string::npos) << stale.output;
}

}  // namespace
}  // namespace cohort::data
