#include "data/tools.h"

#include <algorithm>
#include <cstdio>

#include "core/status.h"
#include "data/example.h"
#include "data/file.h"
#include "data/jpeg.h"
#include "data/source.h"
#include "data/tfrecord.h"

namespace cohort::data {
namespace {

SourceOptions source_options(const Config& c, const std::string& path) {
  SourceOptions o;
  o.path = path;
  o.kind = c.get_string("data_source");
  o.split = c.get_string("data_split");
  o.crc_check = true;
  o.write_index = false;
  o.label_offset = c.get_int("label_offset");
  o.on_error = OnError::kSkip;
  o.check_labels = false;  // the tools read every record and report each bad one
  o.rebuild_stale_index = c.get_string("stale_index") == "rebuild";
  return o;
}

std::string shard_name(const std::string& split, int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%05d-of-%05d", split.c_str(), i, n);
  return buf;
}

}  // namespace

PackResult pack_folder(const Config& config, const std::string& image_dir, const std::string& out_dir, int shards,
                       const Report& report) {
  require(shards >= 1 && shards <= 100000, "shards must be in [1, 100000], got ", shards);
  SourceOptions so = source_options(config, image_dir);
  so.kind = "folder";
  auto src = open_source(so);
  make_directories(out_dir);
  const std::string split = config.get_string("data_split");
  std::vector<std::unique_ptr<TFRecordWriter>> writers;
  for (int i = 0; i < shards; ++i)
    writers.push_back(std::make_unique<TFRecordWriter>(join_path(out_dir, shard_name(split, i, shards))));
  auto names = src->class_names();
  JpegDecoder decoder(JpegDct::kFast, static_cast<uint64_t>(config.get_int("max_image_pixels")));
  PackResult result;
  result.shards = shards;
  Sample s;
  for (int64_t i = 0; i < src->size(); ++i) {
    JpegHeader h;
    try {
      src->read(i, s);
      h = decoder.read_header(s.encoded);
      decoder.decode_full(s.encoded);
    } catch (const Error& e) {
      report(cat("skipped ", src->origin(i), ": ", e.what()));
      ++result.skipped;
      continue;
    }
    Features f;
    f["image/encoded"].bytes.emplace_back(s.encoded.begin(), s.encoded.end());
    f["image/format"].bytes = {"JPEG"};
    f["image/filename"].bytes = {base_name(src->origin(i).substr(1, src->origin(i).size() - 2))};
    f["image/class/text"].bytes = {names.at(static_cast<size_t>(s.label - so.label_offset))};
    f["image/class/label"].kind = Feature::Kind::kInt64;
    f["image/class/label"].ints = {s.label};
    f["image/height"].kind = Feature::Kind::kInt64;
    f["image/height"].ints = {h.height};
    f["image/width"].kind = Feature::Kind::kInt64;
    f["image/width"].ints = {h.width};
    writers[static_cast<size_t>(result.written % shards)]->write(encode_example(f));
    ++result.written;
  }
  for (int i = 0; i < shards; ++i) {
    std::string path = join_path(out_dir, shard_name(split, i, shards));
    writers[static_cast<size_t>(i)]->close(path + ".idx");
  }
  report(cat("packed ", result.written, " images of ", names.size(), " classes into ", shards, " shards in '", out_dir,
             "'", result.skipped ? cat(", skipped ", result.skipped, " bad images") : std::string()));
  return result;
}

void inspect_source(const Config& config, const std::string& path, int64_t limit, const Report& report) {
  auto src = open_source(source_options(config, path));
  report(cat("source: ", src->kind()));
  report(cat("samples: ", src->size()));
  report(cat("description: ", src->describe()));
  auto names = src->class_names();
  if (!names.empty()) {
    std::string line = cat("classes: ", names.size(), " (");
    for (size_t i = 0; i < names.size() && i < 20; ++i) line += cat(i ? ", " : "", i, "=", names[i]);
    report(line + (names.size() > 20 ? ", ...)" : ")"));
  } else if (src->classes() > 0) {
    report(cat("classes: ", src->classes()));
  }
  for (const auto& p : src->problems()) report(cat("problem: ", p));
  JpegDecoder decoder;
  Sample s;
  int64_t min_w = INT64_MAX, max_w = 0, min_h = INT64_MAX, max_h = 0, shown = std::min(limit, src->size());
  for (int64_t i = 0; i < shown; ++i) {
    try {
      src->read(i, s);
      int w = s.raw_w, h = s.raw_h, c = s.raw_c;
      if (s.kind == Sample::Kind::kEncoded) {
        auto hdr = decoder.read_header(s.encoded);
        w = hdr.width;
        h = hdr.height;
        c = hdr.components;
      }
      min_w = std::min<int64_t>(min_w, w);
      max_w = std::max<int64_t>(max_w, w);
      min_h = std::min<int64_t>(min_h, h);
      max_h = std::max<int64_t>(max_h, h);
      report(cat("  ", i, ": label ", s.label, ", ", w, "x", h, "x", c,
                 s.kind == Sample::Kind::kEncoded ? cat(", ", s.encoded.size(), " bytes") : std::string(),
                 s.boxes.empty() ? std::string() : cat(", ", s.boxes.size(), " boxes"), "  ", src->origin(i)));
    } catch (const Error& e) {
      report(cat("  ", i, ": BROKEN ", src->origin(i), ": ", e.what()));
    }
  }
  if (shown > 0 && max_w > 0)
    report(cat("image sizes of the first ", shown, ": width ", min_w, "..", max_w, ", height ", min_h, "..", max_h));
}

int64_t verify_source(const Config& config, const std::string& path, const Report& report) {
  auto src = open_source(source_options(config, path));
  int64_t broken = 0;
  for (const auto& p : src->problems()) {
    report(cat("BROKEN ", p));
    ++broken;
  }
  JpegDecoder decoder(JpegDct::kFast, static_cast<uint64_t>(config.get_int("max_image_pixels")));
  Sample s;
  for (int64_t i = 0; i < src->size(); ++i) {
    try {
      src->read(i, s);
      if (s.kind == Sample::Kind::kEncoded) {
        decoder.decode_full(s.encoded);
        for (const auto& w : decoder.warnings()) report(cat("WARNING ", src->origin(i), ": ", w));
      }
    } catch (const Error& e) {
      std::string what = e.what();
      std::string origin = src->origin(i);
      report(cat("BROKEN ", what.rfind(origin, 0) == 0 ? what : cat(origin, ": ", what)));
      ++broken;
    }
  }
  report(cat("checked ", src->size(), " samples: ", broken, broken == 1 ? " is" : " are", " broken"));
  return broken;
}

}  // namespace cohort::data
