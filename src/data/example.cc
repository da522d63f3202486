#include "data/example.h"

#include <cstring>

#include "core/status.h"

namespace cohort::data {
namespace {

// Bounds-checked protobuf wire reader; every error names the origin.
class Wire {
 public:
  Wire(std::span<const uint8_t> bytes, const std::string& origin)
      : p_(bytes.data()), end_(p_ + bytes.size()), origin_(origin) {}
  bool done() const { return p_ == end_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) bad("truncated varint");
      uint8_t b = *p_++;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad("varint longer than 10 bytes");
  }
  std::span<const uint8_t> bytes() {
    uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) bad(cat("length ", n, " runs past the end of its message"));
    std::span<const uint8_t> out(p_, static_cast<size_t>(n));
    p_ += n;
    return out;
  }
  uint32_t fixed32() {
    if (end_ - p_ < 4) bad("truncated fixed32");
    uint32_t v;
    std::memcpy(&v, p_, 4);
    p_ += 4;
    return v;
  }
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0:
        varint();
        break;
      case 1:
        if (end_ - p_ < 8) bad("truncated fixed64");
        p_ += 8;
        break;
      case 2:
        bytes();
        break;
      case 5:
        fixed32();
        break;
      default:
        bad(cat("unknown wire type ", wire_type));
    }
  }
  // Reads a field key; returns false at the end.
  bool key(uint32_t* field, uint32_t* wire_type) {
    if (done()) return false;
    uint64_t k = varint();
    *field = static_cast<uint32_t>(k >> 3);
    *wire_type = static_cast<uint32_t>(k & 7);
    if (*field == 0) bad("field number 0");
    return true;
  }
  [[noreturn]] void bad(const std::string& what) const {
    fail(Code::kCorruptData, origin_, ": not a tf.train.Example (", what, ")");
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& origin_;
};

float as_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Calls fn(name, feature_bytes) for every entry of Example.features.feature.
template <typename Fn>
void for_each_feature(std::span<const uint8_t> bytes, const std::string& origin, Fn&& fn) {
  Wire ex(bytes, origin);
  uint32_t f, wt;
  while (ex.key(&f, &wt)) {
    if (f != 1 || wt != 2) {
      if (f == 1) ex.bad("features is not a message");
      ex.skip(wt);
      continue;
    }
    Wire features(ex.bytes(), origin);
    while (features.key(&f, &wt)) {
      if (f != 1 || wt != 2) {
        if (f == 1) features.bad("feature map entry is not a message");
        features.skip(wt);
        continue;
      }
      Wire entry(features.bytes(), origin);
      std::string_view name;
      std::span<const uint8_t> value;
      while (entry.key(&f, &wt)) {
        if (f == 1 && wt == 2) {
          auto b = entry.bytes();
          name = std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
        } else if (f == 2 && wt == 2) {
          value = entry.bytes();
        } else {
          entry.skip(wt);
        }
      }
      fn(name, value);
    }
  }
}

// Parses a Feature message into the generic form.
void parse_feature(std::span<const uint8_t> bytes, const std::string& origin, Feature& out) {
  Wire feat(bytes, origin);
  uint32_t f, wt;
  out = Feature{};
  while (feat.key(&f, &wt)) {
    if (wt != 2 || f < 1 || f > 3) {
      feat.skip(wt);
      continue;
    }
    Wire list(feat.bytes(), origin);
    out.kind = f == 1 ? Feature::Kind::kBytes : f == 2 ? Feature::Kind::kFloat : Feature::Kind::kInt64;
    uint32_t lf, lwt;
    while (list.key(&lf, &lwt)) {
      if (lf != 1) {
        list.skip(lwt);
        continue;
      }
      if (f == 1) {
        if (lwt != 2) list.bad("bytes_list value is not length-delimited");
        auto b = list.bytes();
        out.bytes.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
      } else if (f == 2) {
        if (lwt == 5) {
          out.floats.push_back(as_float(list.fixed32()));
        } else if (lwt == 2) {
          auto packed = list.bytes();
          if (packed.size() % 4) list.bad("packed float list length is not a multiple of 4");
          for (size_t i = 0; i < packed.size(); i += 4) {
            uint32_t bits;
            std::memcpy(&bits, packed.data() + i, 4);
            out.floats.push_back(as_float(bits));
          }
        } else {
          list.bad("float_list value has a wrong wire type");
        }
      } else {
        if (lwt == 0) {
          out.ints.push_back(static_cast<int64_t>(list.varint()));
        } else if (lwt == 2) {
          Wire packed(list.bytes(), origin);
          while (!packed.done()) out.ints.push_back(static_cast<int64_t>(packed.varint()));
        } else {
          list.bad("int64_list value has a wrong wire type");
        }
      }
    }
  }
}

// Encoding helpers.
void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}
void put_bytes(std::vector<uint8_t>& out, uint32_t field, const void* data, size_t n) {
  put_varint(out, (uint64_t(field) << 3) | 2);
  put_varint(out, n);
  const auto* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + n);
}

}  // namespace

Features parse_example(std::span<const uint8_t> bytes, const std::string& origin) {
  Features out;
  for_each_feature(bytes, origin, [&](std::string_view name, std::span<const uint8_t> value) {
    parse_feature(value, origin, out[std::string(name)]);
  });
  return out;
}

void parse_image_example(std::span<const uint8_t> bytes, const std::string& origin, ImageExample& out) {
  out.image = {};
  out.has_label = false;
  out.label = out.height = out.width = 0;
  out.boxes.clear();
  Feature scratch;
  std::vector<float> coords[4];  // ymin, xmin, ymax, xmax
  static constexpr std::string_view kBox[4] = {"image/object/bbox/ymin", "image/object/bbox/xmin",
                                               "image/object/bbox/ymax", "image/object/bbox/xmax"};
  bool found_image = false;
  for_each_feature(bytes, origin, [&](std::string_view name, std::span<const uint8_t> value) {
    if (name == "image/encoded") {
      // Take the first bytes value as a view (no copy).
      Wire feat(value, origin);
      uint32_t f, wt;
      while (feat.key(&f, &wt)) {
        if (f == 1 && wt == 2) {
          Wire list(feat.bytes(), origin);
          uint32_t lf, lwt;
          while (list.key(&lf, &lwt)) {
            if (lf == 1 && lwt == 2 && !found_image) {
              out.image = list.bytes();
              found_image = true;
            } else {
              list.skip(lwt);
            }
          }
        } else {
          feat.skip(wt);
        }
      }
      return;
    }
    bool wanted = name == "image/class/label" || name == "image/height" || name == "image/width";
    int box = -1;
    for (int i = 0; i < 4; ++i)
      if (name == kBox[i]) box = i;
    if (!wanted && box < 0) return;
    parse_feature(value, origin, scratch);
    if (box >= 0) {
      coords[box] = scratch.floats;
    } else if (!scratch.ints.empty()) {
      if (name == "image/class/label") {
        out.has_label = true;
        out.label = scratch.ints[0];
      } else if (name == "image/height") {
        out.height = scratch.ints[0];
      } else {
        out.width = scratch.ints[0];
      }
    }
  });
  if (!found_image) fail(Code::kCorruptData, origin, ": the Example has no image/encoded bytes");
  size_t n = coords[0].size();
  if (coords[1].size() == n && coords[2].size() == n && coords[3].size() == n) {
    for (size_t i = 0; i < n; ++i) {
      BBox b{coords[0][i], coords[1][i], coords[2][i], coords[3][i]};
      if (b.ymin < b.ymax && b.xmin < b.xmax && b.ymin >= 0 && b.xmin >= 0 && b.ymax <= 1 && b.xmax <= 1)
        out.boxes.push_back(b);
    }
  }
}

bool parse_example_label(std::span<const uint8_t> bytes, const std::string& origin, int64_t* label) {
  bool found = false;
  Feature scratch;
  for_each_feature(bytes, origin, [&](std::string_view name, std::span<const uint8_t> value) {
    if (name != "image/class/label") return;
    parse_feature(value, origin, scratch);
    if (scratch.ints.empty()) return;
    found = true;
    *label = scratch.ints[0];
  });
  return found;
}

std::vector<uint8_t> encode_example(const Features& features, bool packed) {
  std::vector<uint8_t> feature_map;
  for (const auto& [name, feature] : features) {
    std::vector<uint8_t> list;
    uint32_t list_field = 1;
    switch (feature.kind) {
      case Feature::Kind::kBytes:
        for (const auto& b : feature.bytes) put_bytes(list, 1, b.data(), b.size());
        break;
      case Feature::Kind::kFloat:
        list_field = 2;
        if (packed) {
          put_bytes(list, 1, feature.floats.data(), feature.floats.size() * 4);
        } else {
          for (float v : feature.floats) {
            put_varint(list, (1 << 3) | 5);
            uint8_t raw[4];
            std::memcpy(raw, &v, 4);
            list.insert(list.end(), raw, raw + 4);
          }
        }
        break;
      case Feature::Kind::kInt64:
        list_field = 3;
        if (packed) {
          std::vector<uint8_t> values;
          for (int64_t v : feature.ints) put_varint(values, static_cast<uint64_t>(v));
          put_bytes(list, 1, values.data(), values.size());
        } else {
          for (int64_t v : feature.ints) {
            put_varint(list, (1 << 3) | 0);
            put_varint(list, static_cast<uint64_t>(v));
          }
        }
        break;
    }
    std::vector<uint8_t> feat;
    put_bytes(feat, list_field, list.data(), list.size());
    std::vector<uint8_t> entry;
    put_bytes(entry, 1, name.data(), name.size());
    put_bytes(entry, 2, feat.data(), feat.size());
    put_bytes(feature_map, 1, entry.data(), entry.size());
  }
  std::vector<uint8_t> example;
  put_bytes(example, 1, feature_map.data(), feature_map.size());
  return example;
}

}  // namespace cohort::data
