// What a data_dir holds, decided from file names and content rather than from the
// folder's shape alone: TFRecord shards (by split name and record framing), MNIST IDX
// files (by magic), an image folder (sub-folders that hold images). A layout that is
// ambiguous or not one of these is an error that says what was found and what was
// expected.
#pragma once

#include <string>
#include <vector>

namespace cohort::data {

// What a file's first bytes are.
enum class Content { kEmpty, kTFRecord, kIdx, kJpeg, kOtherImage, kGzip, kText, kUnknown };

// Reads at most the first 64 bytes (a gzip file: the first bytes of its payload too).
Content sniff_content(const std::string& path);
// "a JPEG image", "a TFRecord shard", "text", ... for messages.
std::string describe(Content content);
std::string describe_content(const std::string& path);

// The name ends in an image extension (.jpg, .jpeg, .png, ...; any case).
bool has_image_extension(const std::string& name);

// The files of a class sub-folder that are samples: names with an image extension, and
// files whose content is a JPEG whatever their name. *ignored receives the rest.
std::vector<std::string> image_files(const std::string& dir, std::vector<std::string>* ignored);

// The names written by each split: train-*/train.* and validation-*/validation.*.
bool named_by_split(const std::string& name, const std::string& split);

struct Layout {
  std::string kind;                 // tfrecord | idx | folder
  std::vector<std::string> shards;  // tfrecord: every shard found (all splits), sorted paths
  std::vector<std::string> notes;   // what was ignored, one line each (logged)
};

// Decides the kind of the dataset at `path` (a file or a directory; not a pattern).
// Throws kInvalidArgument naming what was found and the layouts cohort reads.
Layout detect_layout(const std::string& path);

// The text that lists the layouts, for error messages.
std::string expected_layouts(const std::string& path);

}  // namespace cohort::data
