// The JPEG path: header, window decode at a scale chosen from the input, and the
// resampler writing a sample, from arbitrary bytes. Input: one knob byte (crop draw,
// colour on/off), then the JPEG (the seeds in seeds/jpeg have that layout).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "data/augment.h"
#include "data/jpeg.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static cohort::data::JpegDecoder decoder(cohort::data::JpegDct::kFast, 4000000);
  static cohort::data::Renderer renderer;
  static std::vector<float> out(3 * 32 * 32);
  if (size < 2) return 0;
  uint8_t knob = data[0];
  std::span<const uint8_t> jpeg(data + 1, size - 1);
  try {
    auto h = decoder.read_header(jpeg);
    cohort::data::AugmentOptions o;
    o.out_w = o.out_h = 32;
    o.color_jitter = knob & 1;
    auto d = cohort::data::draw_sample(h.width, h.height, {}, o, 0, knob, knob);
    auto win = decoder.decode_window(jpeg, d.crop.x, d.crop.y, d.crop.w, d.crop.h, o.out_w, o.out_h);
    renderer.render(win.pixels, win.width, win.height, win.stride, 3, win.crop_x, win.crop_y, win.crop_w, win.crop_h, d,
                    o, out.data());
  } catch (const cohort::Error&) {
  }
  return 0;
}
