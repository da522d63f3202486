// Test data made on the fly: procedural images, JPEGs encoded with libjpeg in every
// flavour the decoder must handle, TFRecord shards, and temporary folders.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "data/example.h"
#include "data/tfrecord.h"

namespace cohort::data::testing {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/cohort-data-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// Smooth gradients plus a few sharp shapes, RGB, deterministic per seed.
inline std::vector<uint8_t> procedural_rgb(int w, int h, int seed = 0) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>((x * 255) / std::max(1, w - 1));
      p[1] = static_cast<uint8_t>((y * 255) / std::max(1, h - 1));
      p[2] = static_cast<uint8_t>(((x + y + seed * 37) * 2) & 0xff);
      if (((x / 16) + (y / 16) + seed) % 5 == 0) p[2] = static_cast<uint8_t>(255 - p[2]);
    }
  return px;
}

struct JpegFlavour {
  int components = 3;  // 1 gray, 3 RGB, 4 CMYK (stored Adobe-inverted)
  int quality = 95;
  bool progressive = false;
  int h_samp = 2, v_samp = 2;  // luma sampling: 2x2 = 4:2:0, 2x1 = 4:2:2, 1x1 = 4:4:4
};

inline std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int w, int h, const JpegFlavour& f) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = f.components;
  c.in_color_space = f.components == 1 ? JCS_GRAYSCALE : f.components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&c);
  if (f.components == 4) jpeg_set_colorspace(&c, JCS_YCCK);
  jpeg_set_quality(&c, f.quality, TRUE);
  if (f.components >= 3) {
    c.comp_info[0].h_samp_factor = f.h_samp;
    c.comp_info[0].v_samp_factor = f.v_samp;
  }
  if (f.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<JSAMPROW> rows(static_cast<size_t>(h));
  for (int y = 0; y < h; ++y)
    rows[static_cast<size_t>(y)] = const_cast<uint8_t*>(pixels) + static_cast<size_t>(y) * w * f.components;
  while (c.next_scanline < c.image_height)
    jpeg_write_scanlines(&c, &rows[c.next_scanline], c.image_height - c.next_scanline);
  jpeg_finish_compress(&c);
  std::vector<uint8_t> bytes(out, out + size);
  jpeg_destroy_compress(&c);
  std::free(out);
  return bytes;
}

inline std::vector<uint8_t> rgb_jpeg(int w, int h, int seed = 0, JpegFlavour f = {}) {
  auto px = procedural_rgb(w, h, seed);
  return encode_jpeg(px.data(), w, h, f);
}

// Reference: a plain full decode to RGB at full scale with the accurate IDCT.
inline std::vector<uint8_t> reference_decode(const std::vector<uint8_t>& jpeg, int* w, int* h, bool fast = false) {
  jpeg_decompress_struct d{};
  jpeg_error_mgr err{};
  d.err = jpeg_std_error(&err);
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, jpeg.data(), jpeg.size());
  jpeg_read_header(&d, TRUE);
  d.out_color_space = JCS_RGB;
  d.dct_method = fast ? JDCT_IFAST : JDCT_ISLOW;
  jpeg_start_decompress(&d);
  *w = static_cast<int>(d.output_width);
  *h = static_cast<int>(d.output_height);
  std::vector<uint8_t> px(static_cast<size_t>(*w) * *h * 3);
  while (d.output_scanline < d.output_height) {
    JSAMPROW row = px.data() + static_cast<size_t>(d.output_scanline) * *w * 3;
    jpeg_read_scanlines(&d, &row, 1);
  }
  jpeg_finish_decompress(&d);
  jpeg_destroy_decompress(&d);
  return px;
}

inline std::vector<uint8_t> image_example(const std::vector<uint8_t>& jpeg, int64_t label, std::vector<BBox> boxes = {},
                                          bool packed = true) {
  Features f;
  f["image/encoded"].kind = Feature::Kind::kBytes;
  f["image/encoded"].bytes.emplace_back(jpeg.begin(), jpeg.end());
  f["image/class/label"].kind = Feature::Kind::kInt64;
  f["image/class/label"].ints = {label};
  f["image/format"].bytes = {"JPEG"};
  if (!boxes.empty()) {
    const char* names[4] = {"image/object/bbox/ymin", "image/object/bbox/xmin", "image/object/bbox/ymax",
                            "image/object/bbox/xmax"};
    for (int i = 0; i < 4; ++i) f[names[i]].kind = Feature::Kind::kFloat;
    for (const auto& b : boxes) {
      f[names[0]].floats.push_back(b.ymin);
      f[names[1]].floats.push_back(b.xmin);
      f[names[2]].floats.push_back(b.ymax);
      f[names[3]].floats.push_back(b.xmax);
    }
  }
  return encode_example(f, packed);
}

}  // namespace cohort::data::testing
