// The JPEG path: header, window decode at a scale chosen from the input, and the
// resampler writing a sample, from arbitrary bytes. Input: one knob byte (crop draw,
// colour on/off), then the JPEG (the seeds in seeds/jpeg have that layout).
//
// Asserts that the verdict on a file does not depend on the crop: a verifying decode of
// the drawn crop and one of the whole image at another output size both succeed or both
// fail, and a file that passes decodes at that crop without verifying too.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/status.h"
#include "data/augment.h"
#include "data/jpeg.h"

namespace {

bool decodes(cohort::data::JpegDecoder& decoder, std::span<const uint8_t> jpeg, const cohort::data::Crop& c, int out,
             bool verify) {
  try {
    decoder.decode_window(jpeg, c.x, c.y, c.w, c.h, out, out, verify);
    return true;
  } catch (const cohort::Error& e) {
    if (e.code() == cohort::Code::kInternal) throw;
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static cohort::data::JpegDecoder decoder(cohort::data::JpegDct::kFast, 4000000);
  static cohort::data::Renderer renderer;
  static std::vector<float> out(3 * 32 * 32);
  if (size < 2) return 0;
  uint8_t knob = data[0];
  std::span<const uint8_t> jpeg(data + 1, size - 1);
  cohort::data::JpegHeader h;
  try {
    h = decoder.read_header(jpeg);
  } catch (const cohort::Error&) {
    return 0;
  }
  cohort::data::AugmentOptions o;
  o.out_w = o.out_h = 32;
  o.color_jitter = knob & 1;
  auto d = cohort::data::draw_sample(h.width, h.height, {}, o, 0, knob, knob);
  const bool crop_ok = decodes(decoder, jpeg, d.crop, 32, true);
  const bool whole_ok = decodes(decoder, jpeg, {0, 0, h.width, h.height}, 8, true);
  if (crop_ok != whole_ok) {
    std::fprintf(stderr, "verdict depends on the crop: %d at %d,%d %dx%d, %d for the whole %dx%d image\n", crop_ok,
                 d.crop.x, d.crop.y, d.crop.w, d.crop.h, whole_ok, h.width, h.height);
    __builtin_trap();
  }
  if (!crop_ok) return 0;
  try {
    auto win = decoder.decode_window(jpeg, d.crop.x, d.crop.y, d.crop.w, d.crop.h, o.out_w, o.out_h);
    renderer.render(win.image(), win.crop(), d, o, out.data());
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "a verified file failed to decode at its crop: %s\n", e.what());
    __builtin_trap();
  }
  return 0;
}
