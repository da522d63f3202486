// tf.train.Example: a minimal protobuf wire-format parser for the features an image
// pipeline needs (bytes, packed or unpacked int64 and float lists) and an encoder.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::data {

struct BBox {
  float ymin = 0, xmin = 0, ymax = 1, xmax = 1;
};

// What the pipeline takes from one Example. Spans point into the parsed bytes.
struct ImageExample {
  std::span<const uint8_t> image;  // image/encoded
  bool has_label = false;
  int64_t label = 0;              // image/class/label
  int64_t height = 0, width = 0;  // image/height, image/width when present
  std::vector<BBox> boxes;        // image/object/bbox/*
};

// Parses the Example; throws kCorruptData (prefixed with origin) when the bytes are not
// a well-formed Example or lack image/encoded.
void parse_image_example(std::span<const uint8_t> bytes, const std::string& origin, ImageExample& out);

// Reads only image/class/label (its first value; the last such feature wins, as in
// parse_image_example) without looking at the image. Returns false when the Example
// has no label; throws kCorruptData like parse_image_example for malformed bytes.
bool parse_example_label(std::span<const uint8_t> bytes, const std::string& origin, int64_t* label);

// A generic feature, for tools and tests.
struct Feature {
  enum class Kind { kBytes, kFloat, kInt64 } kind = Kind::kBytes;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};
using Features = std::map<std::string, Feature>;

// Parses every feature (throws kCorruptData like parse_image_example).
Features parse_example(std::span<const uint8_t> bytes, const std::string& origin);

// Encodes an Example; lists of numbers are packed unless `packed` is false.
std::vector<uint8_t> encode_example(const Features& features, bool packed = true);

}  // namespace cohort::data
