// Test data made on the fly: procedural images, JPEGs encoded with libjpeg in every
// flavour the decoder must handle, TFRecord shards, and temporary folders.
#pragma once

#include <unistd.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "core/status.h"
#include "data/example.h"
#include "data/jpeg.h"
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
  int exif_orientation = 0;    // 1..8: an APP1 Exif segment holding this orientation
};

// An APP1 payload: "Exif\0\0", a little- or big-endian TIFF header and an IFD0 whose
// one entry is the orientation.
inline std::vector<uint8_t> exif_app1(int orientation, bool little = true) {
  std::vector<uint8_t> d = {'E', 'x', 'i', 'f', 0, 0};
  auto put = [&](uint32_t v, int n) {
    for (int i = 0; i < n; ++i) d.push_back(static_cast<uint8_t>(v >> (8 * (little ? i : n - 1 - i))));
  };
  d.push_back(little ? 'I' : 'M');
  d.push_back(little ? 'I' : 'M');
  put(42, 2);
  put(8, 4);       // IFD0 right after the header
  put(1, 2);       // one entry
  put(0x0112, 2);  // orientation
  put(3, 2);       // SHORT
  put(1, 4);       // one value
  put(static_cast<uint32_t>(orientation), 2);
  put(0, 2);
  put(0, 4);  // no next IFD
  return d;
}

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
  if (f.exif_orientation > 0) {
    auto app1 = exif_app1(f.exif_orientation);
    jpeg_write_marker(&c, JPEG_APP0 + 1, app1.data(), static_cast<unsigned>(app1.size()));
  }
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

// What a plain libjpeg full decode makes of a file: -1 on a fatal error, else the
// number of warnings it met (libjpeg counts them and goes on).
inline int reference_warnings(const std::vector<uint8_t>& jpeg) {
  struct Err {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
  };
  jpeg_decompress_struct d{};
  Err err{};
  d.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = [](j_common_ptr c) { std::longjmp(reinterpret_cast<Err*>(c->err)->jump, 1); };
  err.pub.emit_message = [](j_common_ptr c, int level) {
    if (level < 0) c->err->num_warnings++;
  };
  jpeg_create_decompress(&d);
  // Sized for the widest JPEG before setjmp: nothing it owns changes across a longjmp.
  std::vector<uint8_t> row(65535 * 3);
  volatile int result = -1;
  if (setjmp(err.jump) == 0) {
    jpeg_mem_src(&d, jpeg.data(), jpeg.size());
    jpeg_read_header(&d, TRUE);
    d.out_color_space = JCS_RGB;
    jpeg_start_decompress(&d);
    while (d.output_scanline < d.output_height) {
      JSAMPROW r = row.data();
      jpeg_read_scanlines(&d, &r, 1);
    }
    jpeg_finish_decompress(&d);
    result = static_cast<int>(err.pub.num_warnings);
  }
  jpeg_destroy_decompress(&d);
  return result;
}

// Where the entropy-coded data of a single-scan JPEG lies: after the SOS segment, up
// to the EOI marker.
inline std::pair<size_t, size_t> entropy_span(const std::vector<uint8_t>& jpeg) {
  size_t at = 2;
  while (at + 4 <= jpeg.size() && jpeg[at] == 0xFF && jpeg[at + 1] != 0xDA)
    at += 2 + (static_cast<size_t>(jpeg[at + 2]) << 8 | jpeg[at + 3]);
  size_t start = at + 2 + (static_cast<size_t>(jpeg[at + 2]) << 8 | jpeg[at + 3]);
  return {start, jpeg.size() - 2};
}

// A baseline JPEG with one bit flipped in its entropy-coded data, which a full libjpeg
// decode warns about but a decode of its top third never reaches.
inline std::vector<uint8_t> flipped_bit_jpeg() {
  auto good = rgb_jpeg(96, 96, 5);
  auto [start, end] = entropy_span(good);
  JpegDecoder dec;
  for (size_t at = end - 4; at > start + (end - start) * 3 / 4; --at) {
    if (good[at] == 0xFF || good[at - 1] == 0xFF) continue;  // leave markers and stuffing alone
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = good;
      bad[at] ^= static_cast<uint8_t>(1 << bit);
      if (bad[at] == 0xFF || reference_warnings(bad) <= 0) continue;
      try {
        dec.decode_window(bad, 0, 0, 96, 32, 96, 32, false);
        return bad;
      } catch (const Error&) {
      }
    }
  }
  return {};
}

// DIR/CLASS/NAME with these bytes (the class folder made when missing).
inline void put_image(const std::string& dir, const std::string& cls, const std::string& name,
                      const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(dir + "/" + cls);
  FILE* f = std::fopen((dir + "/" + cls + "/" + name).c_str(), "wb");
  if (!f) return;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
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
