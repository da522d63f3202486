// Input data integrity: the layout of data_dir told from names and content, runs that
// cannot succeed on nothing, JPEG verdicts that do not depend on the crop, and
// synthetic batches per rank. Every dataset is built here.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>

#include "core/config.h"
#include "core/status.h"
#include "data/detect.h"
#include "data/file.h"
#include "data/idx.h"
#include "data/jpeg.h"
#include "data/pipeline.h"
#include "data_test_util.h"

namespace cohort::data {
namespace {

using testing::TempDir;

std::string error_of(const std::function<void()>& f, Code* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

PipelineOptions options(const std::string& dir, std::initializer_list<std::pair<const char*, const char*>> kv) {
  Config c;
  c.set("data_dir", dir);
  c.set("image_size", "16");
  c.set("batch_size", "4");
  c.set("error_log_limit", "0");
  for (auto& [k, v] : kv) c.set(k, v);
  return pipeline_options(c, 0, 1, 2);
}

void write_shard(const std::string& path, int first, int n) {
  TFRecordWriter w(path);
  for (int i = first; i < first + n; ++i) w.write(testing::image_example(testing::rgb_jpeg(24, 16, i), i % 3));
  w.close("");
}

void write_text(const std::string& path, const std::string& text) { write_file(path, text.data(), text.size()); }

// ---- the layout of data_dir ----

TEST(Layout, ShardsBesideLogsAndIndexFoldersAreReadAsShards) {
  TempDir dir;
  write_shard(dir / "train-00000-of-00002", 0, 4);
  write_shard(dir / "train-00001-of-00002", 4, 3);
  std::filesystem::create_directories(dir / "logs");
  write_text(dir / "logs/events.out", std::string("\x01\x02\x03\x00\x04", 5));
  std::filesystem::create_directories(dir / "idx");
  write_text(dir / "idx/train-00000-of-00002.idx", "0 100\n");
  write_text(dir / "README", "ImageNet shards\n");
  Layout layout = detect_layout(dir.path);
  EXPECT_EQ(layout.kind, "tfrecord");
  EXPECT_EQ(layout.shards.size(), 2u);
  auto o = options(dir.path, {{"augment", "none"}});
  auto src = open_source(o.source);
  EXPECT_EQ(src->kind(), "tfrecord");
  EXPECT_EQ(src->size(), 7);
  Pipeline p(o, src);
  int64_t valid = 0;
  for (int64_t s = 0; s < p.steps_per_epoch(); ++s) valid += p.next().valid;
  EXPECT_EQ(valid, 7);
  EXPECT_EQ(p.stats().skipped, 0);
}

TEST(Layout, AFlatFolderOfJpegsAsksForClassSubFolders) {
  TempDir dir;
  for (int i = 0; i < 3; ++i) {
    auto j = testing::rgb_jpeg(16, 16, i);
    write_file(dir / ("img" + std::to_string(i) + ".jpg"), j.data(), j.size());
  }
  Code code = Code::kOk;
  std::string what = error_of([&] { open_source(options(dir.path, {}).source); }, &code);
  EXPECT_EQ(code, Code::kInvalidArgument);
  EXPECT_CONTAINS(what, "3 images");
  EXPECT_CONTAINS(what, "no class sub-folders");
  EXPECT_CONTAINS(what, "one sub-folder per class");
  // Named explicitly as shards, the files say what they are instead of "length CRC mismatch".
  what = error_of([&] { open_source(options(dir.path, {{"data_source", "tfrecord"}}).source); });
  EXPECT_CONTAINS(what, "is a JPEG image, not a TFRecord shard");
  // Explicitly an image folder: it has no class sub-folders.
  what = error_of([&] { open_source(options(dir.path, {{"data_source", "folder"}}).source); });
  EXPECT_CONTAINS(what, "no class sub-folders");
}

TEST(Layout, ASingleImageOrTextFileIsNotADataset) {
  TempDir dir;
  auto j = testing::rgb_jpeg(16, 16);
  write_file(dir / "cat.jpg", j.data(), j.size());
  write_text(dir / "notes.txt", "not a dataset\n");
  std::string what = error_of([&] { open_source(options(dir / "cat.jpg", {}).source); });
  EXPECT_CONTAINS(what, "is a JPEG image, not a dataset");
  EXPECT_CONTAINS(what, "CLASS/IMAGE.jpg");
  what = error_of([&] { open_source(options(dir / "notes.txt", {}).source); });
  EXPECT_CONTAINS(what, "is text, not a dataset");
  EXPECT_CONTAINS(what, "data_source=");
  // A single shard is read as one.
  write_shard(dir / "one.tfrecord", 0, 2);
  EXPECT_EQ(open_source(options(dir / "one.tfrecord", {}).source)->size(), 2);
}

TEST(Layout, ShardsBesideImageSubFoldersAreAmbiguous) {
  TempDir dir;
  write_shard(dir / "train-0", 0, 2);
  testing::put_image(dir.path, "cat", "a.jpg", testing::rgb_jpeg(16, 16));
  std::string what = error_of([&] { open_source(options(dir.path, {}).source); });
  EXPECT_CONTAINS(what, "ambiguous");
  EXPECT_CONTAINS(what, "'cat/'");
  EXPECT_CONTAINS(what, "data_source=tfrecord or data_source=folder");
  EXPECT_EQ(open_source(options(dir.path, {{"data_source", "tfrecord"}}).source)->size(), 2);
  EXPECT_EQ(open_source(options(dir.path, {{"data_source", "folder"}}).source)->size(), 1);
}

TEST(Layout, AnImageFolderNeedsEverySubFolderToHoldImages) {
  TempDir dir;
  testing::put_image(dir.path, "cat", "a.jpg", testing::rgb_jpeg(16, 16, 1));
  testing::put_image(dir.path, "dog", "b.JPEG", testing::rgb_jpeg(16, 16, 2));
  testing::put_image(dir.path, "dog", "no_extension", testing::rgb_jpeg(16, 16, 3));
  write_text(dir / "dog/labels.csv", "b,dog\n");
  auto src = open_source(options(dir.path, {}).source);
  EXPECT_EQ(src->kind(), "folder");
  EXPECT_EQ(src->size(), 3);  // labels.csv is not a sample; the JPEG without extension is
  EXPECT_EQ(src->class_names(), (std::vector<std::string>{"cat", "dog"}));
  // A sub-folder without images would be a class of its own and shift every label.
  std::filesystem::create_directories(dir / "logs");
  write_text(dir / "logs/run.txt", "loss 0\n");
  for (const char* kind : {"auto", "folder"}) {
    std::string what = error_of([&] { open_source(options(dir.path, {{"data_source", kind}}).source); });
    EXPECT_CONTAINS(what, "'logs/'");
    EXPECT_CONTAINS(what, "hold no images");
    EXPECT_CONTAINS(what, "one sub-folder per class");
  }
}

TEST(Layout, MnistFilesAreFoundByTheirMagicWhateverElseIsThere) {
  TempDir dir;
  IdxArray images{{3, 4, 5}, std::vector<uint8_t>(60, 7)}, labels{{3}, {0, 1, 2}};
  auto ib = encode_idx(images), lb = encode_idx(labels);
  write_file(dir / "train-images-idx3-ubyte", ib.data(), ib.size());
  write_file(dir / "train-labels-idx1-ubyte", lb.data(), lb.size());
  std::filesystem::create_directories(dir / "logs");
  write_text(dir / "README.md", "# MNIST\n");
  auto src = open_source(options(dir.path, {}).source);
  EXPECT_EQ(src->kind(), "idx");
  EXPECT_EQ(src->size(), 3);
  // Named like IDX but not IDX: not taken for MNIST.
  TempDir fake;
  write_text(fake / "train-images-idx3-ubyte", "hello\n");
  EXPECT_CONTAINS(error_of([&] { open_source(options(fake.path, {}).source); }), "holds no dataset");
}

TEST(Layout, ASplitWithOnlyTheOtherSplitsShardsIsAnError) {
  TempDir dir;
  write_shard(dir / "train-0", 0, 2);
  auto o = options(dir.path, {{"data_split", "validation"}});
  std::string what = error_of([&] { open_source(o.source); });
  EXPECT_CONTAINS(what, "no validation-* shards");
  EXPECT_CONTAINS(what, "train-*");
  // Shards named by no split serve either split.
  TempDir plain;
  write_shard(plain / "part-0", 0, 2);
  EXPECT_EQ(open_source(options(plain.path, {{"data_split", "validation"}}).source)->size(), 2);
}

TEST(Layout, AnImageNetStyleTreeSaysWhichFolderToName) {
  TempDir dir;
  testing::put_image(dir / "train", "n01", "a.jpg", testing::rgb_jpeg(16, 16));
  std::string what = error_of([&] { open_source(options(dir.path, {}).source); });
  EXPECT_CONTAINS(what, "point data_dir at '" + dir / "train'");
  TempDir empty;
  EXPECT_CONTAINS(error_of([&] { open_source(options(empty.path, {}).source); }), "is empty");
}

// ---- no success on nothing ----

TEST(Skipped, AnAllCorruptFolderFailsInsteadOfTrainingOnNothing) {
  TempDir dir;
  for (int i = 0; i < 12; ++i)
    testing::put_image(dir.path, i % 2 ? "cat" : "dog", std::to_string(i) + ".jpg", {'G', 'I', 'F', '8', '9', 'a'});
  for (const char* fraction : {"0.01", "1"}) {
    SCOPED_TRACE(fraction);
    auto o = options(dir.path, {{"max_skipped_fraction", fraction}});
    Pipeline p(o, open_source(o.source));
    int64_t batches = 0;
    std::string what;
    try {
      for (; batches < 3; ++batches) p.next();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kCorruptData);
      what = e.what();
    }
    if (std::string(fraction) == "1") {
      // Only the end of the epoch shows that every sample was bad.
      EXPECT_EQ(batches, 2);
      EXPECT_CONTAINS(what, "every one of the 12 samples");
    } else {
      EXPECT_EQ(batches, 0);  // 4 bad samples already exceed 1% of the epoch's 12
      EXPECT_CONTAINS(what, "max_skipped_fraction=0.01");
    }
    EXPECT_CONTAINS(what, "not a JPEG");
    EXPECT_CONTAINS(what, "cohort-data verify");
    EXPECT_THROW(p.next(), Error);  // stays failed
  }
}

// 40 images, every fifth one bad, batches of 4 in file order.
std::string one_in_five_bad(const TempDir& dir) {
  for (int i = 0; i < 40; ++i) {
    auto bytes = i % 5 == 4 ? std::vector<uint8_t>{'n', 'o', 'p', 'e'} : testing::rgb_jpeg(16, 16, i);
    char name[16];
    std::snprintf(name, sizeof name, "%02d.jpg", i);
    testing::put_image(dir.path, "all", name, bytes);
  }
  return dir.path;
}

TEST(Skipped, TheFractionFailsAsSoonAsTheEpochCannotStayWithinIt) {
  TempDir dir;
  one_in_five_bad(dir);
  // 8 of 40 bad: 20%. A bound of 10% (4 samples of the epoch) is exceeded at the 5th bad
  // one, sample 24, in the 7th batch: long before the epoch ends.
  auto o = options(dir.path, {{"max_skipped_fraction", "0.1"}, {"shuffle", "false"}});
  Pipeline p(o, open_source(o.source));
  for (int64_t valid : {4, 3, 3, 3, 3, 4}) EXPECT_EQ(p.next().valid, valid);
  std::string what = error_of([&] { p.next(); });
  EXPECT_CONTAINS(what, "5 of the 28 samples read so far");
  EXPECT_CONTAINS(what, "max_skipped_fraction=0.1 of the 40 this rank reads by the end of the epoch");
  // A bound it stays within: two whole epochs, the count in the stats.
  auto ok = options(dir.path, {{"max_skipped_fraction", "0.2"}});
  Pipeline q(ok, open_source(ok.source));
  int64_t valid = 0;
  for (int64_t s = 0; s < 2 * q.steps_per_epoch(); ++s) valid += q.next().valid;
  EXPECT_EQ(valid, 64);
  EXPECT_EQ(q.stats().skipped, 16);
}

// ---- JPEG verdicts that do not depend on the crop ----

TEST(JpegVerdict, AFlippedBitLibjpegWarnsAboutIsAnErrorWhateverTheCrop) {
  auto bad = testing::flipped_bit_jpeg();
  ASSERT_FALSE(bad.empty()) << "no bit flip made libjpeg warn";
  JpegDecoder dec;
  // Decoding only the top third does not reach the damage...
  EXPECT_NO_THROW(dec.decode_window(bad, 0, 0, 96, 32, 96, 32, false));
  // ...but a verifying decode reads on to the end, for any window and output size.
  for (int out : {8, 24, 96})
    for (Crop c : {Crop{0, 0, 96, 32}, Crop{0, 32, 96, 32}, Crop{0, 0, 96, 96}}) {
      Code code = Code::kOk;
      std::string what = error_of([&] { dec.decode_window(bad, c.x, c.y, c.w, c.h, out, out, true); }, &code);
      EXPECT_EQ(code, Code::kJpeg) << out << " " << c.y;
      EXPECT_CONTAINS(what, "Corrupt JPEG data");
    }
  EXPECT_THROW(dec.decode_full(bad), Error);
  // The decoder is fine afterwards.
  auto good = testing::rgb_jpeg(96, 96, 5);
  EXPECT_NO_THROW(dec.decode_window(good, 0, 32, 96, 32, 24, 24, true));
}

TEST(JpegVerdict, ExtraneousBytesBeforeTheEndMarkerAreAnError) {
  auto jpeg = testing::rgb_jpeg(64, 48, 2);
  jpeg.insert(jpeg.end() - 2, {0x12, 0x34, 0x56});
  ASSERT_GT(testing::reference_warnings(jpeg), 0);
  JpegDecoder dec;
  EXPECT_NO_THROW(dec.decode_window(jpeg, 0, 0, 32, 16, 32, 16, false));
  std::string what = error_of([&] { dec.decode_window(jpeg, 0, 0, 32, 16, 32, 16, true); });
  EXPECT_CONTAINS(what, "extraneous bytes before marker");
}

TEST(JpegVerdict, AFileTruncatedAt95PercentIsRejectedAtEveryOutputSizeAndCrop) {
  for (bool progressive : {false, true}) {
    testing::JpegFlavour f;
    f.progressive = progressive;
    auto jpeg = testing::rgb_jpeg(200, 150, 4, f);
    jpeg.resize(jpeg.size() * 95 / 100);
    JpegDecoder dec;
    int accepted_without_verify = 0;
    for (int out : {8, 16, 32, 64, 150})
      for (Crop c : {Crop{0, 0, 200, 30}, Crop{50, 40, 60, 60}, Crop{0, 0, 200, 150}, Crop{100, 120, 100, 30},
                     Crop{0, 0, 25, 25}}) {
        SCOPED_TRACE(::testing::Message() << "progressive " << progressive << " out " << out << " crop " << c.x << ","
                                          << c.y << " " << c.w << "x" << c.h);
        Code code = Code::kOk;
        error_of([&] { dec.decode_window(jpeg, c.x, c.y, c.w, c.h, out, out, true); }, &code);
        EXPECT_EQ(code, Code::kJpeg);
        try {
          dec.decode_window(jpeg, c.x, c.y, c.w, c.h, out, out, false);
          ++accepted_without_verify;
        } catch (const Error&) {
        }
      }
    // A progressive file is read whole before any row comes out; a baseline one is not,
    // which is why the verdict needs the verifying decode.
    if (progressive) {
      EXPECT_EQ(accepted_without_verify, 0);
    } else {
      EXPECT_GT(accepted_without_verify, 0);
    }
  }
}

TEST(JpegVerdict, ThePipelineSkipsADamagedFileInEveryEpochWhateverItsCrops) {
  TempDir dir;
  for (int i = 0; i < 6; ++i)
    testing::put_image(dir.path, "a", std::to_string(i) + ".jpg", testing::rgb_jpeg(96, 96, i));
  testing::put_image(dir.path, "a", "flipped.jpg", testing::flipped_bit_jpeg());
  auto cut = testing::rgb_jpeg(96, 96, 9);
  cut.resize(cut.size() * 95 / 100);
  testing::put_image(dir.path, "a", "truncated.jpg", cut);
  auto o = options(dir.path, {{"augment", "standard"}, {"max_skipped_fraction", "0.3"}, {"batch_size", "8"}});
  Pipeline p(o, open_source(o.source));
  ASSERT_EQ(p.steps_per_epoch(), 1);
  for (int epoch = 0; epoch < 12; ++epoch) EXPECT_EQ(p.next().valid, 6) << "epoch " << epoch;
  EXPECT_EQ(p.stats().skipped, 24);
}

TEST(JpegVerdict, MetadataWarningsAreKeptNotFatal) {
  auto jpeg = testing::rgb_jpeg(32, 32, 1);
  ASSERT_EQ(std::string(jpeg.begin() + 6, jpeg.begin() + 10), "JFIF");
  jpeg[11] = 3;  // JFIF major version 3
  ASSERT_EQ(testing::reference_warnings(jpeg), 1);
  JpegDecoder dec;
  EXPECT_NO_THROW(dec.decode_full(jpeg));
  ASSERT_EQ(dec.warnings().size(), 1u);
  EXPECT_CONTAINS(dec.warnings()[0], "JFIF revision");
}

// ---- synthetic data per rank ----

TEST(Synthetic, EachRankDrawsItsOwnBatches) {
  auto batch = [](int rank, const char* seed) {
    Config c;
    c.set("batch_size", "4");
    c.set("image_size", "8");
    c.set("seed", seed);
    auto o = pipeline_options(c, rank, 2, 1);
    Pipeline p(o, open_source(o.source));
    const BatchView& b = p.next();
    const auto* px = static_cast<const uint8_t*>(b.images.data());
    std::vector<uint8_t> out(px, px + b.images.nbytes());
    const auto* l = static_cast<const uint8_t*>(b.labels.data());
    out.insert(out.end(), l, l + b.labels.nbytes());
    return out;
  };
  EXPECT_EQ(batch(0, "1"), batch(0, "1"));
  EXPECT_NE(batch(0, "1"), batch(1, "1"));
  EXPECT_NE(batch(1, "1"), batch(1, "2"));
}

}  // namespace
}  // namespace cohort::data

namespace cohort::data {
namespace {

// libjpeg keeps tables across images: a file without its quantization tables must fail
// after a complete file as it fails alone, not borrow the earlier file's tables.
TEST(JpegVerdict, AFileLackingATableDoesNotBorrowTheLastFilesTables) {
  auto good = testing::rgb_jpeg(32, 32, 1);
  std::vector<uint8_t> no_dqt(good.begin(), good.begin() + 2);
  for (size_t at = 2; at + 4 <= good.size();) {
    const size_t len = 2 + (static_cast<size_t>(good[at + 2]) << 8 | good[at + 3]);
    if (good[at + 1] != 0xDB) no_dqt.insert(no_dqt.end(), good.begin() + at, good.begin() + at + len);
    if (good[at + 1] == 0xDA) {
      no_dqt.insert(no_dqt.end(), good.begin() + at + len, good.end());
      break;
    }
    at += len;
  }
  ASSERT_LT(no_dqt.size(), good.size());
  JpegDecoder alone;
  EXPECT_THROW(alone.decode_full(no_dqt), Error);
  JpegDecoder after;
  after.decode_full(good);
  std::string what = error_of([&] { after.decode_full(no_dqt); });
  EXPECT_CONTAINS(what, "Quantization table 0x00 was not defined");
}

}  // namespace
}  // namespace cohort::data
