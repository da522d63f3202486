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
};

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings that mean the data is damaged are errors; the rest are ignored.
void on_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE || code == JWRN_MUST_RESYNC)
    on_error_exit(cinfo);
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

struct JpegDecoder::Impl {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  JpegDct dct;
  uint64_t max_pixels;
  std::vector<uint8_t> buffer;  // decoded rows, RGB or CMYK
  std::vector<JSAMPROW> rows;

  // The libjpeg calls that may longjmp live in functions with only trivially
  // destructible locals, so a jump never skips a destructor.
  int read_header(std::span<const uint8_t> jpeg, JpegHeader* h) {
    if (setjmp(err.jump)) {
      jpeg_abort_decompress(&cinfo);
      return -1;
    }
    jpeg_mem_src(&cinfo, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(&cinfo, TRUE);
    h->width = static_cast<int>(cinfo.image_width);
    h->height = static_cast<int>(cinfo.image_height);
    h->components = cinfo.num_components;
    h->progressive = cinfo.progressive_mode != 0;
    h->cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    return 0;
  }

  // Sets up output and reads rows [y0, y1) of columns [x0, x1) at scale n/8.
  // Returns 0 and fills out, or -1 with err.message set.
  int decode(int n, int* x0, int y0_in, int y1_in, int x1_in, int* out_w, int* out_rows, bool* cmyk_inverted) {
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
    if (buffer.size() < need) {
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
    jpeg_abort_decompress(&cinfo);
    return 0;
  }
};

JpegDecoder::JpegDecoder(JpegDct dct, uint64_t max_pixels) : impl_(std::make_unique<Impl>()) {
  impl_->dct = dct;
  impl_->max_pixels = max_pixels;
  impl_->cinfo.err = jpeg_std_error(&impl_->err.pub);
  impl_->err.pub.error_exit = on_error_exit;
  impl_->err.pub.emit_message = on_emit_message;
  jpeg_create_decompress(&impl_->cinfo);
}

JpegDecoder::~JpegDecoder() { jpeg_destroy_decompress(&impl_->cinfo); }

JpegHeader JpegDecoder::read_header(std::span<const uint8_t> jpeg) {
  JpegHeader h = header_in_progress(jpeg);
  jpeg_abort_decompress(&impl_->cinfo);
  return h;
}

JpegHeader JpegDecoder::header_in_progress(std::span<const uint8_t> jpeg) {
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
  return h;
}

DecodedWindow JpegDecoder::decode_window(std::span<const uint8_t> jpeg, int x, int y, int w, int h, int out_w,
                                         int out_h) {
  JpegHeader hdr = header_in_progress(jpeg);
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
  int r = impl_->decode(n, &x0, sy0, sy1, sx1, &width, &rows, &inverted);
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
  return decode_window(jpeg, 0, 0, hdr.width, hdr.height, hdr.width, hdr.height);
}

}  // namespace cohort::data
