// TFRecord labels are checked when the source is opened (check_labels=create): a label
// out of range after label_offset is an error naming the shard, record and offset, and
// corrupt records met by that scan follow on_error. check_labels=read keeps the check
// at read time.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "core/config.h"
#include "core/status.h"
#include "data/example.h"
#include "data/file.h"
#include "data/pipeline.h"
#include "data/source.h"
#include "data_test_util.h"

namespace cohort::data {
namespace {

using testing::TempDir;

struct Shards {
  std::vector<std::string> paths;
  std::vector<std::vector<RecordExtent>> extents;
};

// n records spread round-robin over `shards` files train-0000S; record i has label
// first_label + i. A small JPEG each (the scan never decodes it).
Shards write_shards(const TempDir& dir, int n, int shards, int64_t first_label, int image_px = 16) {
  Shards out;
  std::vector<TFRecordWriter> writers;
  for (int s = 0; s < shards; ++s) {
    out.paths.push_back(dir / ("train-0000" + std::to_string(s)));
    writers.emplace_back(out.paths.back());
  }
  for (int i = 0; i < n; ++i)
    writers[static_cast<size_t>(i % shards)].write(
        testing::image_example(testing::rgb_jpeg(image_px, image_px, i), first_label + i));
  for (auto& w : writers) {
    out.extents.push_back(w.extents());
    w.close("");
  }
  return out;
}

SourceOptions source_options(const TempDir& dir, int64_t num_classes, int64_t label_offset = 0) {
  SourceOptions o;
  o.path = dir.path;
  o.num_classes = num_classes;
  o.label_offset = label_offset;
  return o;
}

std::string open_error(const SourceOptions& o, Code* code = nullptr) {
  try {
    open_source(o);
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return {};
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST(CheckLabels, ALabelEqualToNumClassesFailsAtCreateNamingTheRecordAndTheFix) {
  TempDir dir;
  Shards shards = write_shards(dir, 10, 2, 1);  // 1-based labels 1..10, as ImageNet TFRecords
  for (int threads : {1, 4}) {
    auto o = source_options(dir, 10);
    o.scan_threads = threads;
    Code code = Code::kOk;
    std::string what = open_error(o, &code);
    EXPECT_EQ(code, Code::kInvalidArgument);
    // Label 10 is record 9: shard 1, its record 4.
    expect_contains(what, "'" + shards.paths[1] + "'");
    expect_contains(what, "record 4");
    expect_contains(what, "offset " + std::to_string(shards.extents[1][4].offset));
    expect_contains(what, "label 10 as stored");
    expect_contains(what, "label_offset 0");
    expect_contains(what, "num_classes 10");
    expect_contains(what, "label_offset=-1");
    expect_contains(what, "check_labels");
    if (threads == 1) std::printf("the error: %s\n", what.c_str());
  }
  auto ok = open_source(source_options(dir, 10, -1));
  EXPECT_EQ(ok->size(), 10);
  Sample s;
  std::set<int64_t> labels;
  for (int64_t i = 0; i < ok->size(); ++i) {
    ok->read(i, s);
    labels.insert(s.label);
  }
  EXPECT_EQ(labels, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(CheckLabels, ALabelFarAboveNumClassesSuggestsMoreClasses) {
  TempDir dir;
  write_shards(dir, 4, 1, 5);  // labels 5..8
  std::string what = open_error(source_options(dir, 2));
  expect_contains(what, "(record 0)");
  expect_contains(what, "num_classes=6");
  EXPECT_EQ(open_error(source_options(dir, 9)), "");
}

TEST(CheckLabels, ANegativeLabelAfterTheOffsetFailsEvenWithoutNumClasses) {
  TempDir dir;
  Shards shards = write_shards(dir, 6, 3, 0);  // already 0-based
  for (int64_t classes : {0, 6}) {
    std::string what = open_error(source_options(dir, classes, -1));
    expect_contains(what, "'" + shards.paths[0] + "'");
    expect_contains(what, "record 0");
    expect_contains(what, "offset 0");
    expect_contains(what, "label 0 as stored");
    expect_contains(what, "label_offset -1");
    expect_contains(what, "= -1");
    expect_contains(what, "label_offset=0");
  }
  EXPECT_EQ(open_error(source_options(dir, 0)), "");
}

TEST(CheckLabels, LabelsBeyondInt32OrThatOverflowAreNotClassLabels) {
  for (int64_t stored : {int64_t(1) << 40, INT64_MAX, INT64_MIN}) {
    TempDir dir;
    TFRecordWriter w(dir / "train-0");
    w.write(testing::image_example(testing::rgb_jpeg(8, 8), stored));
    w.close("");
    for (int64_t offset : {int64_t(0), int64_t(1), int64_t(-1)}) {
      std::string what = open_error(source_options(dir, 0, offset));
      expect_contains(what, "label " + std::to_string(stored) + " as stored");
      expect_contains(what, "not a class label");
      expect_contains(what, "the int32 label range");
    }
  }
}

TEST(CheckLabels, TheErrorNamesTheFirstBadShardWhateverTheThreadCount) {
  TempDir dir;
  Shards shards = write_shards(dir, 40, 8, 0);
  // Record i (label i) is record i / 8 of shard i % 8: labels 32..39 are bad, one in
  // every shard; the first in shard order is record 4 of shard 0.
  for (int threads : {1, 3, 8, 16}) {
    auto o = source_options(dir, 32);
    o.scan_threads = threads;
    std::string what = open_error(o);
    expect_contains(what, "'" + shards.paths[0] + "' offset " + std::to_string(shards.extents[0][4].offset));
    expect_contains(what, "(record 4)");
  }
}

TEST(CheckLabels, ReadDefersTheCheckToTheRecordsRead) {
  TempDir dir;
  Shards shards = write_shards(dir, 10, 2, 1);
  auto o = source_options(dir, 10);
  o.check_labels = false;
  auto src = open_source(o);
  ASSERT_EQ(src->size(), 10);
  Sample s;
  src->read(0, s);  // shard 0 record 0: label 1
  EXPECT_EQ(s.label, 1);
  // Index 9 is shard 1, record 4: label 10.
  try {
    src->read(9, s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kCorruptData);
    std::string what = e.what();
    expect_contains(what, "'" + shards.paths[1] + "' offset " + std::to_string(shards.extents[1][4].offset));
    expect_contains(what, "label_offset=-1");
  }
}

// Flips a byte inside the JPEG of a record: the header CRC stays valid (the shard
// indexes fine) and the Example still parses, but the data CRC does not match.
void corrupt_record(const std::string& path, const RecordExtent& extent) {
  auto bytes = read_file(path);
  size_t soi = extent.offset + 12;
  while (!(bytes[soi] == 0xff && bytes[soi + 1] == 0xd8)) ++soi;
  ASSERT_LT(soi + 40, extent.offset + extent.size);
  bytes[soi + 30] ^= 0x40;
  write_file(path, bytes.data(), bytes.size());
}

TEST(CheckLabels, ACorruptRecordDuringTheScanFollowsOnError) {
  TempDir dir;
  Shards shards = write_shards(dir, 8, 2, 0);
  corrupt_record(shards.paths[1], shards.extents[1][2]);  // index 4 + 2 = 6
  auto o = source_options(dir, 8);
  o.on_error = OnError::kFail;
  Code code = Code::kOk;
  std::string what = open_error(o, &code);
  EXPECT_EQ(code, Code::kCorruptData);
  expect_contains(what, "'" + shards.paths[1] + "' offset " + std::to_string(shards.extents[1][2].offset));
  expect_contains(what, "(record 2)");
  expect_contains(what, "CRC");
  expect_contains(what, "on_error=fail");

  o.on_error = OnError::kSkip;
  // 1 of 8 is more than max_skipped_fraction's default.
  expect_contains(open_error(o), "max_skipped_fraction");
  o.max_skipped_fraction = 0.125;
  auto src = open_source(o);
  EXPECT_EQ(src->size(), 8);  // the record stays; reading it fails and is skipped then
  ASSERT_EQ(src->problems().size(), 1u);
  expect_contains(src->problems()[0], "1 of 8 records");
  Sample s;
  EXPECT_THROW(src->read(6, s), Error);
  src->read(7, s);
  EXPECT_EQ(s.label, 7);

  // A bad label after a corrupt record in the same shard is still found under skip.
  o.num_classes = 7;
  expect_contains(open_error(o), "(record 3)");

  // Without CRC checks the flipped byte (inside the JPEG) goes unnoticed by the scan.
  o.num_classes = 8;
  o.crc_check = false;
  EXPECT_TRUE(open_source(o)->problems().empty());
}

TEST(CheckLabels, RecordsThatAreNotExamplesOrHaveNoLabelAreCorrupt) {
  TempDir dir;
  {
    TFRecordWriter w(dir / "train-0");
    w.write(testing::image_example(testing::rgb_jpeg(8, 8), 0));
    std::vector<uint8_t> junk = {0x0a, 0xff, 0xff, 0xff, 0x0f};
    w.write(junk);
    Features f;
    f["image/encoded"].bytes = {"xx"};
    w.write(encode_example(f));
    w.close("");
  }
  auto o = source_options(dir, 2);
  o.max_skipped_fraction = 1;
  auto src = open_source(o);
  ASSERT_EQ(src->problems().size(), 1u);
  expect_contains(src->problems()[0], "2 of 3 records");
  o.on_error = OnError::kFail;
  std::string what = open_error(o);
  expect_contains(what, "(record 1)");
  expect_contains(what, "not a tf.train.Example");
}

TEST(CheckLabels, AValidDatasetCreatesAndTheOptionReachesTheSource) {
  TempDir dir;
  write_shards(dir, 30, 3, 1);
  Config c;
  c.set("data_dir", dir.path);
  c.set("num_classes", "30");
  c.set("label_offset", "-1");
  c.set("augment", "none");
  c.set("image_size", "8");
  c.set("batch_size", "30");
  c.set("decode_threads", "3");
  auto o = pipeline_options(c, 0, 1, 2);
  EXPECT_TRUE(o.source.check_labels);
  EXPECT_EQ(o.source.scan_threads, 3);
  Pipeline p(o, open_source(o.source));
  const BatchView& b = p.next();
  EXPECT_EQ(b.valid, 30);
  std::set<int32_t> labels(b.labels.data_as<int32_t>(), b.labels.data_as<int32_t>() + 30);
  EXPECT_EQ(labels.size(), 30u);
  EXPECT_EQ(*labels.begin(), 0);
  EXPECT_EQ(*labels.rbegin(), 29);

  c.set("check_labels", "read");
  EXPECT_FALSE(pipeline_options(c, 0, 1, 2).source.check_labels);
  EXPECT_THROW(c.set("check_labels", "sometimes"), Error);
}

TEST(CheckLabels, ThroughThePipelineAnOutOfRangeLabelIsSkippedOrFatalOnlyUnderRead) {
  TempDir dir;
  write_shards(dir, 10, 2, 1);
  Config c;
  c.set("data_dir", dir.path);
  c.set("num_classes", "10");
  c.set("augment", "none");
  c.set("image_size", "8");
  c.set("batch_size", "10");
  EXPECT_THROW(open_source(pipeline_options(c, 0, 1, 2).source), Error);  // create (default)
  c.set("check_labels", "read");
  c.set("max_skipped_fraction", "0.1");
  auto o = pipeline_options(c, 0, 1, 2);
  {
    Pipeline p(o, open_source(o.source));
    EXPECT_EQ(p.next().valid, 9);  // on_error=skip: the record with label 10 is skipped
    EXPECT_GE(p.stats().errors, 1);
  }
  c.set("on_error", "fail");
  o = pipeline_options(c, 0, 1, 2);
  Pipeline p(o, open_source(o.source));
  try {
    p.next();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    expect_contains(e.what(), "label_offset=-1");
  }
}

// Create time with and without the scan. COHORT_LABELS_BENCH_RECORDS sets the size
// (default 256 records of 64x64 JPEGs); prints, asserts nothing about speed.
TEST(CheckLabels, CreateTimeWithAndWithoutTheScan) {
  TempDir dir;
  const char* env = std::getenv("COHORT_LABELS_BENCH_RECORDS");
  int n = env ? std::atoi(env) : 256;
  int px = env ? 224 : 64;
  write_shards(dir, n, 8, 0, px);
  uint64_t bytes = 0;
  for (const auto& name : list_directory(dir.path)) bytes += File(dir / name).size();
  auto o = source_options(dir, n);
  open_source(o);  // indexes written; page cache warm
  for (int threads : {1, 4}) {
    o.scan_threads = threads;
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 3; ++rep)
      for (int scan = 0; scan < 2; ++scan) {
        o.check_labels = scan == 1;
        auto t0 = std::chrono::steady_clock::now();
        auto src = open_source(o);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best[scan] = std::min(best[scan], s);
        EXPECT_EQ(src->size(), n);
      }
    std::printf(
        "open_source of %d records (%.1f MB, 8 shards, warm cache), scan_threads %d: check_labels=read %.3f ms, "
        "check_labels=create %.3f ms\n",
        n, static_cast<double>(bytes) / 1e6, threads, best[0] * 1e3, best[1] * 1e3);
  }
}

}  // namespace
}  // namespace cohort::data
