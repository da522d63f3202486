#include "data/jpeg.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include "core/status.h"
#include "kernels/colour.h"

namespace cohort::data {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  std::vector<std::string>* warnings;
};

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings about metadata that leave the pixels as the encoder meant them.
bool metadata_only(int code) { return code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM || code == JWRN_BOGUS_ICC; }

// Every other warning means the data is corrupt or truncated: an error, wherever in the
// file it is met. Level >= 0 is trace output.
void on_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  if (!metadata_only(cinfo->err->msg_code)) on_error_exit(cinfo);
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  try {
    if (err->warnings->size() < 8) err->warnings->emplace_back(text);
  } catch (...) {
    // Out of memory while keeping a warning: it is only lost.
  }
}

uint32_t load(const uint8_t* p, int n, bool little) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint32_t(p[little ? i : n - 1 - i]) << (8 * i);
  return v;
}

bool swaps_axes(int orientation) { return orientation >= 5; }

// An EXIF orientation as the steps that take displayed coordinates to stored ones:
// swap the axes, then mirror x and/or y.
struct Turn {
  bool swap, flip_x, flip_y;
  explicit Turn(int o)
      : swap(swaps_axes(o)),
        flip_x(o == 2 || o == 3 || o == 7 || o == 8),
        flip_y(o == 3 || o == 4 || o == 6 || o == 7) {}
};

// Edge coordinates (u, v) of the displayed image → (s, t) of the stored one, whose size
// is W x H.
void stored_edge(int o, double W, double H, double u, double v, double* s, double* t) {
  const Turn turn(o);
  const double p = turn.swap ? v : u, q = turn.swap ? u : v;
  *s = turn.flip_x ? W - p : p;
  *t = turn.flip_y ? H - q : q;
}

// The inverse: stored (s, t) → displayed (u, v).
void displayed_edge(int o, double W, double H, double s, double t, double* u, double* v) {
  const Turn turn(o);
  const double p = turn.flip_x ? W - s : s, q = turn.flip_y ? H - t : t;
  *u = turn.swap ? q : p;
  *v = turn.swap ? p : q;
}

struct Rect {
  double x0, y0, x1, y1;
};

template <typename Map>
Rect map_rect(const Rect& r, Map map) {
  double a, b, c, d;
  map(r.x0, r.y0, &a, &b);
  map(r.x1, r.y1, &c, &d);
  return {std::min(a, c), std::min(b, d), std::max(a, c), std::max(b, d)};
}

}  // namespace

int choose_scale(int crop_w, int crop_h, int out_w, int out_h) {
  // Only 1/8, 2/8 and 4/8: libjpeg-turbo has SIMD IDCTs for these (and 8/8); the
  // other scales run its plain C N-by-N IDCTs, slower than decoding at full size.
  for (int n = 1; n < 8; n *= 2) {
    long sw = (static_cast<long>(crop_w) * n + 7) / 8, sh = (static_cast<long>(crop_h) * n + 7) / 8;
    if (sw >= out_w && sh >= out_h) return n;
  }
  return 8;
}

int exif_orientation(std::span<const uint8_t> app1) {
  // "Exif\0\0", then a TIFF header: byte order, 42, the offset of IFD0; IFD0 is a count
  // and 12-byte entries (tag, type, count, value); orientation is tag 0x0112, a SHORT.
  static const uint8_t kExif[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (app1.size() < 6 + 8 || std::memcmp(app1.data(), kExif, 6) != 0) return 1;
  std::span<const uint8_t> tiff = app1.subspan(6);
  bool little = tiff[0] == 'I' && tiff[1] == 'I';
  if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
  if (load(tiff.data() + 2, 2, little) != 42) return 1;
  uint64_t ifd = load(tiff.data() + 4, 4, little);
  if (ifd + 2 > tiff.size()) return 1;
  uint32_t count = load(tiff.data() + ifd, 2, little);
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t at = ifd + 2 + 12 * uint64_t(i);
    if (at + 12 > tiff.size()) return 1;
    const uint8_t* e = tiff.data() + at;
    if (load(e, 2, little) != 0x0112) continue;
    if (load(e + 2, 2, little) != 3 || load(e + 4, 4, little) != 1) return 1;
    uint32_t value = load(e + 8, 2, little);
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

BBox orient_box(const BBox& box, int orientation) {
  Rect r = map_rect({box.xmin, box.ymin, box.xmax, box.ymax}, [&](double s, double t, double* u, double* v) {
    displayed_edge(orientation, 1.0, 1.0, s, t, u, v);
  });
  BBox out = box;
  out.xmin = static_cast<float>(r.x0);
  out.ymin = static_cast<float>(r.y0);
  out.xmax = static_cast<float>(r.x1);
  out.ymax = static_cast<float>(r.y1);
  return out;
}

struct JpegDecoder::Impl {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  JpegDct dct;
  uint64_t max_pixels;
  bool apply_exif = false;
  std::vector<uint8_t> buffer;    // decoded rows, RGB or CMYK
  std::vector<uint8_t> rest;      // one row below the window (verify)
  std::vector<uint8_t> oriented;  // the window turned as displayed
  std::vector<std::string> warnings;

  // The libjpeg calls that may longjmp live in functions with only trivially
  // destructible locals, so a jump never skips a destructor.
  int read_header(std::span<const uint8_t> jpeg, JpegHeader* h) {
    if (setjmp(err.jump)) {
      jpeg_abort_decompress(&cinfo);
      return -1;
    }
    // A fresh libjpeg object per image: libjpeg keeps quantization and Huffman tables
    // across images (for abbreviated streams), so a file lacking one would otherwise be
    // decoded with whatever an earlier file left. Costs well under a microsecond.
    jpeg_destroy_decompress(&cinfo);
    jpeg_create_decompress(&cinfo);
    if (apply_exif) jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_mem_src(&cinfo, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(&cinfo, TRUE);
    h->width = static_cast<int>(cinfo.image_width);
    h->height = static_cast<int>(cinfo.image_height);
    h->components = cinfo.num_components;
    h->progressive = cinfo.progressive_mode != 0;
    h->cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    h->orientation = 1;
    for (jpeg_saved_marker_ptr m = apply_exif ? cinfo.marker_list : nullptr; m; m = m->next)
      if (m->marker == JPEG_APP0 + 1) h->orientation = exif_orientation({m->data, m->data_length});
    return 0;
  }

  // Sets up output and reads rows [y0, y1) of columns [x0, x1) at scale n/8; with verify,
  // then decodes the rest of a single-scan file to its EOI marker (a progressive file
  // was read whole by jpeg_start_decompress). Returns 0 and fills out, or -1 with
  // err.message set.
  int decode(int n, int* x0, int y0_in, int y1_in, int x1_in, bool verify, int* out_w, int* out_rows,
             bool* cmyk_inverted) {
    if (setjmp(err.jump)) {
      jpeg_abort_decompress(&cinfo);
      return -1;
    }
    bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    *cmyk_inverted = cmyk && cinfo.saw_Adobe_marker;
    cinfo.scale_num = static_cast<unsigned>(n);
    cinfo.scale_denom = 8;
    cinfo.dct_method = dct == JpegDct::kFast ? JDCT_IFAST : JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    int full_w = static_cast<int>(cinfo.output_width), full_h = static_cast<int>(cinfo.output_height);
    int y0 = y0_in < 0 ? 0 : (y0_in > full_h - 1 ? full_h - 1 : y0_in);
    int y1 = y1_in > full_h ? full_h : y1_in;
    if (y1 <= y0) y1 = y0 + 1;
    int x1 = x1_in > full_w ? full_w : x1_in;
    if (*x0 < 0) *x0 = 0;
    if (*x0 > full_w - 1) *x0 = full_w - 1;
    if (x1 <= *x0) x1 = *x0 + 1;
    JDIMENSION xoff = static_cast<JDIMENSION>(*x0), width = static_cast<JDIMENSION>(x1 - *x0);
    if (xoff != 0 || static_cast<int>(width) != full_w) jpeg_crop_scanline(&cinfo, &xoff, &width);
    *x0 = static_cast<int>(xoff);
    int comps = cinfo.output_components;
    *out_w = static_cast<int>(width);
    size_t stride = static_cast<size_t>(width) * static_cast<size_t>(comps);
    size_t need = stride * static_cast<size_t>(y1 - y0);
    if (buffer.size() < need || (verify && rest.size() < stride)) {
      jpeg_abort_decompress(&cinfo);
      return -2;
    }
    if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
    int got = 0;
    while (got < y1 - y0) {
      JSAMPROW row = buffer.data() + stride * static_cast<size_t>(got);
      got += static_cast<int>(jpeg_read_scanlines(&cinfo, &row, 1));
    }
    *out_rows = got;
    if (verify && !jpeg_has_multiple_scans(&cinfo)) {
      // Skipping whole rows still entropy-decodes them; skipping to the very end would
      // not, so the last row is read. Finishing then reads the markers up to EOI.
      JDIMENSION last = cinfo.output_height - 1;
      if (cinfo.output_scanline < last) jpeg_skip_scanlines(&cinfo, last - cinfo.output_scanline);
      JSAMPROW row = rest.data();
      while (cinfo.output_scanline < cinfo.output_height) jpeg_read_scanlines(&cinfo, &row, 1);
      jpeg_finish_decompress(&cinfo);
    } else {
      jpeg_abort_decompress(&cinfo);
    }
    return 0;
  }
};

JpegDecoder::JpegDecoder(JpegDct dct, uint64_t max_pixels, bool apply_exif) : impl_(std::make_unique<Impl>()) {
  impl_->dct = dct;
  impl_->max_pixels = max_pixels;
  impl_->apply_exif = apply_exif;
  impl_->err.warnings = &impl_->warnings;
  impl_->cinfo.err = jpeg_std_error(&impl_->err.pub);
  impl_->err.pub.error_exit = on_error_exit;
  impl_->err.pub.emit_message = on_emit_message;
  jpeg_create_decompress(&impl_->cinfo);
}

JpegDecoder::~JpegDecoder() { jpeg_destroy_decompress(&impl_->cinfo); }

const std::vector<std::string>& JpegDecoder::warnings() const { return impl_->warnings; }

JpegHeader JpegDecoder::read_header(std::span<const uint8_t> jpeg) {
  JpegHeader h = header_in_progress(jpeg);
  jpeg_abort_decompress(&impl_->cinfo);
  return h;
}

JpegHeader JpegDecoder::header_in_progress(std::span<const uint8_t> jpeg) {
  impl_->warnings.clear();
  if (jpeg.size() < 4 || jpeg[0] != 0xFF || jpeg[1] != 0xD8)
    fail(Code::kJpeg, "not a JPEG file (",
         jpeg.size() < 2 ? "too short" : cat("starts with 0x", std::hex, int(jpeg[0]), " 0x", int(jpeg[1])), ")");
  JpegHeader h;
  if (impl_->read_header(jpeg, &h) != 0) fail(Code::kJpeg, "bad JPEG: ", impl_->err.message);
  if (h.width <= 0 || h.height <= 0 ||
      static_cast<uint64_t>(h.width) * static_cast<uint64_t>(h.height) > impl_->max_pixels) {
    jpeg_abort_decompress(&impl_->cinfo);
    fail(Code::kCorruptData, "JPEG declares ", h.width, "x", h.height, " pixels, more than max_image_pixels (",
         impl_->max_pixels, ")");
  }
  if (h.components != 1 && h.components != 3 && h.components != 4) {
    jpeg_abort_decompress(&impl_->cinfo);
    fail(Code::kJpeg, "JPEG with ", h.components, " components is not supported");
  }
  if (swaps_axes(h.orientation)) std::swap(h.width, h.height);
  return h;
}

DecodedWindow JpegDecoder::decode_window(std::span<const uint8_t> jpeg, int x, int y, int w, int h, int out_w,
                                         int out_h, bool verify) {
  JpegHeader hdr = header_in_progress(jpeg);
  if (hdr.orientation == 1) return decode_stored(hdr, x, y, w, h, out_w, out_h, verify);
  // The crop as stored, decoded there, then the window turned as displayed.
  const int o = hdr.orientation;
  const double W = swaps_axes(o) ? hdr.height : hdr.width, H = swaps_axes(o) ? hdr.width : hdr.height;
  Rect s = map_rect({double(x), double(y), double(x) + w, double(y) + h},
                    [&](double u, double v, double* a, double* b) { stored_edge(o, W, H, u, v, a, b); });
  JpegHeader stored = hdr;
  stored.width = static_cast<int>(W);
  stored.height = static_cast<int>(H);
  const bool swap = swaps_axes(o);
  DecodedWindow win =
      decode_stored(stored, static_cast<int>(s.x0), static_cast<int>(s.y0), static_cast<int>(s.x1 - s.x0),
                    static_cast<int>(s.y1 - s.y0), swap ? out_h : out_w, swap ? out_w : out_h, verify);
  const int ww = win.width, wh = win.height, dw = swap ? wh : ww, dh = swap ? ww : wh;
  impl_->oriented.resize(static_cast<size_t>(dw) * static_cast<size_t>(dh) * 3);
  for (int dy = 0; dy < dh; ++dy) {
    uint8_t* out = impl_->oriented.data() + static_cast<size_t>(dy) * dw * 3;
    for (int dx = 0; dx < dw; ++dx) {
      double a, b;
      stored_edge(o, ww, wh, dx + 0.5, dy + 0.5, &a, &b);
      const uint8_t* in = win.pixels + static_cast<size_t>(b - 0.5) * win.stride + static_cast<size_t>(a - 0.5) * 3;
      std::memcpy(out + static_cast<size_t>(dx) * 3, in, 3);
    }
  }
  Rect c = map_rect({win.crop_x, win.crop_y, double(win.crop_x) + win.crop_w, double(win.crop_y) + win.crop_h},
                    [&](double a, double b, double* u, double* v) { displayed_edge(o, ww, wh, a, b, u, v); });
  win.pixels = impl_->oriented.data();
  win.width = dw;
  win.height = dh;
  win.stride = static_cast<size_t>(dw) * 3;
  win.crop_x = static_cast<float>(c.x0);
  win.crop_y = static_cast<float>(c.y0);
  win.crop_w = static_cast<float>(c.x1 - c.x0);
  win.crop_h = static_cast<float>(c.y1 - c.y0);
  return win;
}

DecodedWindow JpegDecoder::decode_stored(const JpegHeader& hdr, int x, int y, int w, int h, int out_w, int out_h,
                                         bool verify) {
  int n = choose_scale(w, h, out_w, out_h);
  // Decoded pixel i at scale n/8 covers full-size [8i/n, 8(i+1)/n).
  double s = n / 8.0;
  int sx0 = static_cast<int>(x * s), sy0 = static_cast<int>(y * s);
  int sx1 = static_cast<int>(std::ceil((x + w) * s)), sy1 = static_cast<int>(std::ceil((y + h) * s));
  int x0 = sx0, width = 0, rows = 0;
  bool inverted = false;
  // The worst case for this window (grows only; no allocation once warm).
  size_t full_w = (static_cast<size_t>(hdr.width) * static_cast<size_t>(n) + 7) / 8 + 64;
  size_t need = full_w * 4 * static_cast<size_t>(sy1 - sy0 + 1);
  if (impl_->buffer.size() < need) impl_->buffer.resize(need);
  if (verify && impl_->rest.size() < full_w * 4) impl_->rest.resize(full_w * 4);
  int r = impl_->decode(n, &x0, sy0, sy1, sx1, verify, &width, &rows, &inverted);
  if (r == -1) fail(Code::kJpeg, "bad JPEG: ", impl_->err.message);
  if (r != 0) fail(Code::kInternal, "JPEG window buffer too small");
  DecodedWindow out;
  if (hdr.cmyk) {
    // Convert CMYK rows to RGB in place (4 → 3 bytes per pixel, front to back is safe).
    uint8_t* p = impl_->buffer.data();
    size_t count = static_cast<size_t>(width) * static_cast<size_t>(rows);
    for (size_t i = 0; i < count; ++i)
      kernels::cmyk_to_rgb(p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3], inverted, p + 3 * i);
  }
  out.pixels = impl_->buffer.data();
  out.width = width;
  out.height = rows;
  out.stride = static_cast<size_t>(width) * 3;
  out.crop_x = static_cast<float>(x * s - x0);
  out.crop_y = static_cast<float>(y * s - std::max(0, sy0));
  out.crop_w = static_cast<float>(w * s);
  out.crop_h = static_cast<float>(h * s);
  out.scale_num = n;
  return out;
}

DecodedWindow JpegDecoder::decode_full(std::span<const uint8_t> jpeg) {
  JpegHeader hdr = read_header(jpeg);
  return decode_window(jpeg, 0, 0, hdr.width, hdr.height, hdr.width, hdr.height, true);
}

}  // namespace cohort::data
