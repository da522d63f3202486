// TFRecord framing and index, tf.train.Example parsing, MNIST IDX files, CRC32C.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>

#include "core/status.h"
#include "core/crc32c.h"
#include "data/file.h"
#include "data/idx.h"
#include "data/source.h"
#include "data_test_util.h"

namespace cohort::data {
namespace {

using testing::TempDir;

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Crc32c, MatchesTheCastagnoliCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
  for (size_t n : {0, 1, 7, 8, 9, 63, 1000})
    for (uint32_t seed : {0u, 0xdeadbeefu})
      EXPECT_EQ(crc32c(bytes.data(), n, seed), crc32c_table(bytes.data(), n, seed)) << n;
  // Incremental use gives the whole-buffer value.
  EXPECT_EQ(crc32c(bytes.data() + 100, 900, crc32c(bytes.data(), 100)), crc32c(bytes.data(), 1000));
}

TEST(TFRecord, WritesRecordsThatReadBackWithTheirIndex) {
  TempDir dir;
  TFRecordWriter w(dir / "a.tfrecord");
  w.write(bytes_of("hello"));
  w.write(bytes_of(""));
  w.write(bytes_of(std::string(1000, 'x')));
  w.close(dir / "a.tfrecord.idx");
  File f(dir / "a.tfrecord");
  std::string problem;
  auto scanned = scan_tfrecord(f, true, &problem);
  EXPECT_TRUE(problem.empty());
  ASSERT_EQ(scanned.size(), 3u);
  EXPECT_EQ(scanned[0].offset, 0u);
  EXPECT_EQ(scanned[0].size, 12u + 5 + 4);  // DALI's SIZE is the whole record on disk
  auto text = read_file(dir / "a.tfrecord.idx");
  EXPECT_EQ(std::string(text.begin(), text.end()), "0 21\n21 16\n37 1016\n");
  std::vector<uint8_t> buf;
  auto data = read_record(f, scanned[2], true, buf);
  EXPECT_EQ(std::string(data.begin(), data.end()), std::string(1000, 'x'));
}

TEST(TFRecord, DetectsCrcMismatchAndTruncation) {
  auto rec = frame_record(bytes_of("payload"));
  EXPECT_NO_THROW(parse_record(rec, true, "r"));
  auto bad = rec;
  bad[14] ^= 1;  // data byte
  EXPECT_THROW(parse_record(bad, true, "r"), Error);
  EXPECT_NO_THROW(parse_record(bad, false, "r"));
  auto bad_len = rec;
  bad_len[0] = 200;  // length no longer matches its CRC
  try {
    parse_record(bad_len, true, "rec");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("rec"), std::string::npos);
  }
}

TEST(TFRecord, ALengthBiggerThanTheFileIsCorruptionNotAnAllocation) {
  TempDir dir;
  std::vector<uint8_t> rec = frame_record(bytes_of("abc"));
  // Declare 2^60 bytes with a valid header CRC: a reader that trusted it would allocate.
  uint64_t huge = uint64_t(1) << 60;
  for (int i = 0; i < 8; ++i) rec[static_cast<size_t>(i)] = static_cast<uint8_t>(huge >> (8 * i));
  uint32_t c = masked_crc32c(rec.data(), 8);
  std::memcpy(rec.data() + 8, &c, 4);
  auto good = frame_record(bytes_of("first"));
  good.insert(good.end(), rec.begin(), rec.end());
  write_file(dir / "t.tfrecord", good.data(), good.size());
  File f(dir / "t.tfrecord");
  std::string problem;
  auto extents = scan_tfrecord(f, true, &problem);
  EXPECT_EQ(extents.size(), 1u);
  EXPECT_NE(problem.find("declares"), std::string::npos) << problem;
}

TEST(TFRecord, TruncatedShardKeepsItsGoodRecordsUnderSkipAndFailsUnderFail) {
  TempDir dir;
  std::string shard = dir / "train-00000-of-00001";
  {
    TFRecordWriter w(shard);
    for (int i = 0; i < 3; ++i) w.write(testing::image_example(testing::rgb_jpeg(16, 16, i), i));
    w.close("");
  }
  auto bytes = read_file(shard);
  bytes.resize(bytes.size() - 10);
  write_file(shard, bytes.data(), bytes.size());
  SourceOptions o;
  o.path = dir.path;
  auto src = open_source(o);
  EXPECT_EQ(src->size(), 2);
  EXPECT_FALSE(path_exists(shard + ".idx"));  // an index of a damaged shard is not written
  o.on_error = OnError::kFail;
  EXPECT_THROW(open_source(o), Error);
}

TEST(TFRecord, IndexIsBuiltOnFirstUse) {
  TempDir dir;
  std::string shard = dir / "train-0";
  {
    TFRecordWriter w(shard);
    for (int i = 0; i < 4; ++i) w.write(testing::image_example(testing::rgb_jpeg(16, 16, i), i));
    w.close("");
  }
  SourceOptions o;
  o.path = dir.path;
  EXPECT_EQ(open_source(o)->size(), 4);
  ASSERT_TRUE(path_exists(shard + ".idx"));
  EXPECT_EQ(open_source(o)->size(), 4);  // now read from the index
  EXPECT_TRUE(open_source(o)->problems().empty());
}

// A shard of 69 records and indexes that do not describe it: shorter (the stale index
// that used to hide 39 records), longer, shifted offsets, a wrong size, garbage.
TEST(TFRecord, AnIndexThatDoesNotMatchItsShardIsRebuiltOrFails) {
  TempDir dir;
  std::string shard = dir / "train-0";
  TFRecordWriter w(shard);
  for (int i = 0; i < 69; ++i) w.write(testing::image_example(testing::rgb_jpeg(8 + i % 5, 8, i), i));
  w.close("");
  const auto& e = w.extents();
  auto lines = [&](size_t from, size_t to) {
    std::string text;
    for (size_t i = from; i < to; ++i) text += std::to_string(e[i].offset) + " " + std::to_string(e[i].size) + "\n";
    return text;
  };
  const std::string good = lines(0, 69);
  const uint64_t end = e[68].offset + e[68].size;
  std::vector<std::pair<std::string, std::string>> stale = {
      {"short", lines(0, 30)},
      {"long", good + std::to_string(end) + " 16\n"},
      {"a record missing in the middle", lines(0, 10) + lines(11, 69)},
      {"offsets shifted",
       [&] {
         std::string t;
         for (size_t i = 0; i < 69; ++i)
           t += std::to_string(i == 0 ? 0 : e[i].offset + 1) + " " +
                std::to_string(i == 0    ? e[0].size + 1
                               : i == 68 ? e[i].size - 1
                                         : e[i].size) +
                "\n";
         return t;
       }()},
      // Two records swapped: the index still tiles the file; record 45 is one of those sampled.
      {"two records swapped",
       [&] {
         std::string t = good;
         auto a = std::to_string(e[44].size), b = std::to_string(e[45].size);
         std::string l44 = std::to_string(e[44].offset) + " " + a + "\n",
                     l45 = std::to_string(e[45].offset) + " " + b + "\n";
         t.replace(t.find(l44), l44.size() + l45.size(),
                   std::to_string(e[44].offset) + " " + b + "\n" + std::to_string(e[44].offset + e[45].size) + " " + a +
                       "\n");
         return t;
       }()},
      {"garbage", "zzz\n"},
  };
  ASSERT_NE(stale[4].second, good);
  SourceOptions o;
  o.path = dir.path;
  for (const auto& [what, text] : stale) {
    SCOPED_TRACE(what);
    write_file(shard + ".idx", text.data(), text.size());
    o.rebuild_stale_index = false;
    try {
      open_source(o);
      ADD_FAILURE() << "a stale index was accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), Code::kCorruptData);
      EXPECT_NE(std::string(err.what()).find(shard + ".idx"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("stale_index"), std::string::npos) << err.what();
    }
    o.rebuild_stale_index = true;
    auto src = open_source(o);
    EXPECT_EQ(src->size(), 69);
    ASSERT_EQ(src->problems().size(), 1u);
    EXPECT_NE(src->problems()[0].find("does not match its shard"), std::string::npos) << src->problems()[0];
    auto rewritten = read_file(shard + ".idx");
    EXPECT_EQ(std::string(rewritten.begin(), rewritten.end()), good);  // write_index: the index is rewritten
    Sample s;
    src->read(68, s);
    EXPECT_EQ(s.label, 68);
  }
  // The good index passes the check and is kept.
  o.rebuild_stale_index = false;
  EXPECT_EQ(open_source(o)->size(), 69);
}

TEST(Example, ParsesPackedAndUnpackedLists) {
  for (bool packed : {true, false}) {
    std::vector<uint8_t> jpeg = {0xFF, 0xD8, 1, 2, 3};
    auto bytes = testing::image_example(jpeg, 7, {{0.1f, 0.2f, 0.5f, 0.6f}, {0.0f, 0.0f, 1.0f, 1.0f}}, packed);
    ImageExample ex;
    parse_image_example(bytes, "rec", ex);
    EXPECT_TRUE(ex.has_label);
    EXPECT_EQ(ex.label, 7);
    EXPECT_EQ(std::vector<uint8_t>(ex.image.begin(), ex.image.end()), jpeg);
    ASSERT_EQ(ex.boxes.size(), 2u);
    EXPECT_FLOAT_EQ(ex.boxes[0].ymin, 0.1f);
    EXPECT_FLOAT_EQ(ex.boxes[0].xmin, 0.2f);
    EXPECT_FLOAT_EQ(ex.boxes[0].ymax, 0.5f);
    EXPECT_FLOAT_EQ(ex.boxes[0].xmax, 0.6f);
    auto all = parse_example(bytes, "rec");
    EXPECT_EQ(all.at("image/format").bytes.at(0), "JPEG");
  }
}

TEST(Example, RejectsGarbageAndMissingImage) {
  std::vector<uint8_t> garbage = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f};
  EXPECT_THROW(parse_example(garbage, "g"), Error);
  ImageExample ex;
  Features f;
  f["image/class/label"].kind = Feature::Kind::kInt64;
  f["image/class/label"].ints = {1};
  try {
    parse_image_example(encode_example(f), "'x.tfrecord' offset 0", ex);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("x.tfrecord"), std::string::npos);
  }
  std::vector<uint8_t> wrong_wire = {0x0b};  // field 1, wire type 3
  EXPECT_THROW(parse_example(wrong_wire, "w"), Error);
}

TEST(Idx, ReadsRawAndGzipAndChecksSizes) {
  TempDir dir;
  IdxArray images{{3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
  IdxArray labels{{3}, {0, 1, 2}};
  auto img = encode_idx(images), lab = encode_idx(labels);
  write_file(dir / "train-images-idx3-ubyte", img.data(), img.size());
  gzFile gz = gzopen((dir / "train-labels-idx1-ubyte.gz").c_str(), "wb");
  gzwrite(gz, lab.data(), static_cast<unsigned>(lab.size()));
  gzclose(gz);
  auto back = read_idx(dir / "train-labels-idx1-ubyte.gz");
  EXPECT_EQ(back.dims, labels.dims);
  EXPECT_EQ(back.data, labels.data);
  SourceOptions o;
  o.path = dir.path;
  auto src = open_source(o);
  EXPECT_EQ(src->kind(), "idx");
  EXPECT_EQ(src->size(), 3);
  Sample s;
  src->read(2, s);
  EXPECT_EQ(s.label, 2);
  EXPECT_EQ(s.raw[0], 9);
  // A header declaring more data than the file holds.
  auto shortened = img;
  shortened.pop_back();
  EXPECT_THROW(parse_idx(shortened, "x"), Error);
  // A .gz declaring far more than it can hold is rejected before allocating.
  IdxArray bomb_header{{100000, 10000, 10000}, {}};
  auto bomb = encode_idx(bomb_header);
  gz = gzopen((dir / "bomb.gz").c_str(), "wb");
  gzwrite(gz, bomb.data(), static_cast<unsigned>(bomb.size()));
  gzclose(gz);
  EXPECT_THROW(read_idx(dir / "bomb.gz"), Error);
  std::vector<uint8_t> not_idx = {'P', 'K', 3, 4};
  EXPECT_THROW(parse_idx(not_idx, "zip"), Error);
}

TEST(Idx, LabelsOutOfRangeAreAnErrorAtCreateTime) {
  TempDir dir;
  auto img = encode_idx({{2, 1, 1}, {0, 0}});
  auto lab = encode_idx({{2}, {3, 12}});
  write_file(dir / "train-images-idx3-ubyte", img.data(), img.size());
  write_file(dir / "train-labels-idx1-ubyte", lab.data(), lab.size());
  SourceOptions o;
  o.path = dir.path;
  o.num_classes = 10;
  EXPECT_THROW(open_source(o), Error);
  o.num_classes = 0;
  EXPECT_NO_THROW(open_source(o));
}

TEST(Source, MissingPathAndEmptyDatasetsAreClearErrors) {
  TempDir dir;
  SourceOptions o;
  o.path = dir / "nope";
  try {
    open_source(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
  }
  o.path = dir.path;
  EXPECT_THROW(open_source(o), Error);  // empty directory
  std::filesystem::create_directories(dir / "cat");
  o.kind = "folder";
  EXPECT_THROW(open_source(o), Error);  // classes without files
}

TEST(Source, ImageFolderSortsClassesIntoLabels) {
  TempDir dir;
  for (const char* cls : {"zebra", "ant", "moose"}) {
    std::filesystem::create_directories(dir / cls);
    auto j = testing::rgb_jpeg(8, 8);
    write_file(dir / (std::string(cls) + "/a.jpg"), j.data(), j.size());
  }
  SourceOptions o;
  o.path = dir.path;
  auto src = open_source(o);
  EXPECT_EQ(src->kind(), "folder");
  EXPECT_EQ(src->class_names(), (std::vector<std::string>{"ant", "moose", "zebra"}));
  Sample s;
  src->read(2, s);
  EXPECT_EQ(s.label, 2);
  EXPECT_NE(src->origin(2).find("zebra/a.jpg"), std::string::npos);
}

}  // namespace
}  // namespace cohort::data
