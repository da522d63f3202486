// The work behind `cohort-data`: pack an image folder into TFRecord shards with
// index files, inspect any source, verify every record and image. Output goes line
// by line to a callback so the C API can hand it to any caller.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/config.h"

namespace cohort::data {

using Report = std::function<void(const std::string& line)>;

struct PackResult {
  int64_t written = 0, skipped = 0;
  int shards = 0;
};

// Packs IMAGE_DIR (class sub-folders) into OUT_DIR/<split>-NNNNN-of-NNNNN shards with
// .idx files. Bad images are reported and skipped.
PackResult pack_folder(const Config& config, const std::string& image_dir, const std::string& out_dir, int shards,
                       const Report& report);

// Prints the source kind, sample count, classes and the first `limit` samples with
// their labels and image sizes.
void inspect_source(const Config& config, const std::string& path, int64_t limit, const Report& report);

// Checks every record (CRC, framing, Example) and each index against its shard, and
// decodes every image fully, to its EOI marker; reports each broken one, and libjpeg's
// warnings about images that decode. Returns how many are broken.
int64_t verify_source(const Config& config, const std::string& path, const Report& report);

}  // namespace cohort::data
