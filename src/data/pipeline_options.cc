#include "data/pipeline_options.h"

#include <algorithm>
#include <cmath>

#include "core/config.h"
#include "core/status.h"
#include "core/strings.h"

namespace cohort::data {
namespace {

std::vector<float> parse_floats(const std::string& key, const std::string& text) {
  std::vector<float> out;
  for (const auto& part : split(text, ',')) {
    auto v = parse_double(trim(part));
    require(v.has_value(), "option '", key, "': '", text, "' is not a comma-separated list of numbers");
    out.push_back(static_cast<float>(*v));
  }
  require(!out.empty() && out.size() <= 4, "option '", key, "': expected 1 to 4 values, got '", text, "'");
  return out;
}

void read_source(const Config& c, PipelineOptions& o) {
  SourceOptions& s = o.source;
  s.path = c.get_string("data_dir");
  s.kind = c.get_string("data_source");
  s.split = c.get_string("data_split");
  s.crc_check = c.get_bool("crc_check");
  s.write_index = c.get_bool("write_index");
  s.label_offset = c.get_int("label_offset");
  s.num_classes = c.get_int("num_classes");
  s.on_error = c.get_string("on_error") == "fail" ? OnError::kFail : OnError::kSkip;
  s.synthetic_samples = c.get_int("synthetic_samples");
  s.synthetic_classes = s.num_classes > 0 ? s.num_classes : c.get_int("synthetic_classes");
  s.check_labels = c.get_string("check_labels") == "create";
  s.rebuild_stale_index = c.get_string("stale_index") == "rebuild";
  o.synthetic_channels = static_cast<int>(c.get_int("synthetic_channels"));
  o.on_error = s.on_error;
  o.error_log_limit = static_cast<int>(c.get_int("error_log_limit"));
  s.error_log_limit = o.error_log_limit;
  o.max_skipped_fraction = c.get_float("max_skipped_fraction");
  s.max_skipped_fraction = o.max_skipped_fraction;
}

void read_threads(const Config& c, int thread_budget, PipelineOptions& o) {
  const int budget = std::max(1, thread_budget);
  o.decode_threads = static_cast<int>(c.get_int("decode_threads"));
  if (o.decode_threads == 0) o.decode_threads = budget;
  o.reader_threads = static_cast<int>(c.get_int("reader_threads"));
  if (o.reader_threads == 0) o.reader_threads = budget >= 8 ? 2 : 1;
  o.prefetch_depth = static_cast<int>(c.get_int("prefetch_depth"));
  // The label scan at create runs before any reader or decoder starts: it may use both.
  o.source.scan_threads = std::max(o.reader_threads, o.decode_threads);
}

void read_augment(const Config& c, PipelineOptions& o) {
  AugmentOptions& a = o.augment;
  a.seed = static_cast<uint64_t>(c.get_int("seed"));
  a.dtype = parse_dtype(c.get_string("image_dtype"));
  a.nhwc = c.get_string("data_format") == "NHWC";
  // The preset is applied when the pipeline knows its source and image size (auto
  // depends on both); an option set explicitly (API, command line or environment)
  // overrides it.
  o.preset = c.get_string("augment");
  if (c.is_explicit("random_crop")) o.overrides.random_crop = c.get_bool("random_crop");
  if (c.is_explicit("color_jitter")) o.overrides.color_jitter = c.get_bool("color_jitter");
  if (c.is_explicit("flip_lr_prob")) o.overrides.flip_lr_prob = static_cast<float>(c.get_float("flip_lr_prob"));
  if (c.is_explicit("flip_ud_prob")) o.overrides.flip_ud_prob = static_cast<float>(c.get_float("flip_ud_prob"));
  a.area_min = static_cast<float>(c.get_float("crop_area_min"));
  a.area_max = static_cast<float>(c.get_float("crop_area_max"));
  require(a.area_min <= a.area_max, "crop_area_min (", a.area_min, ") is above crop_area_max (", a.area_max, ")");
  a.aspect_min = static_cast<float>(c.get_float("crop_aspect_min"));
  a.aspect_max = static_cast<float>(c.get_float("crop_aspect_max"));
  require(a.aspect_min <= a.aspect_max, "crop_aspect_min is above crop_aspect_max");
  a.attempts = static_cast<int>(c.get_int("crop_attempts"));
  a.min_object_covered = static_cast<float>(c.get_float("min_object_covered"));
  a.brightness_delta = static_cast<float>(c.get_float("brightness_delta"));
  a.contrast_min = static_cast<float>(c.get_float("contrast_min"));
  a.contrast_max = static_cast<float>(c.get_float("contrast_max"));
  require(a.contrast_min <= a.contrast_max, "contrast_min is above contrast_max");
  a.saturation_min = static_cast<float>(c.get_float("saturation_min"));
  a.saturation_max = static_cast<float>(c.get_float("saturation_max"));
  require(a.saturation_min <= a.saturation_max, "saturation_min is above saturation_max");
  a.hue_delta = static_cast<float>(c.get_float("hue_delta"));
  a.eval_resize = static_cast<int>(c.get_int("eval_resize"));
}

void read_normalisation(const Config& c, PipelineOptions& o) {
  AugmentOptions& a = o.augment;
  o.explicit_mean = c.is_explicit("mean");
  o.explicit_std = c.is_explicit("std");
  auto mean = parse_floats("mean", c.get_string("mean"));
  auto stddev = parse_floats("std", c.get_string("std"));
  for (int i = 0; i < 4; ++i) {
    a.mean[i] = mean[std::min<size_t>(static_cast<size_t>(i), mean.size() - 1)];
    a.stddev[i] = stddev[std::min<size_t>(static_cast<size_t>(i), stddev.size() - 1)];
    require(a.stddev[i] > 0, "option 'std': values must be positive, got '", c.get_string("std"), "'");
  }
}

}  // namespace

PipelineOptions pipeline_options(const Config& c, int rank, int size, int thread_budget) {
  PipelineOptions o;
  o.rank = rank;
  o.size = size;
  read_source(c, o);
  o.batch_size = c.get_int("batch_size");
  o.shuffle = c.get_bool("shuffle");
  o.drop_remainder = c.get_string("remainder") == "drop";
  read_threads(c, thread_budget, o);
  o.dct = c.get_string("jpeg_dct") == "accurate" ? JpegDct::kAccurate : JpegDct::kFast;
  o.max_pixels = static_cast<uint64_t>(c.get_int("max_image_pixels"));
  o.image_size = static_cast<int>(c.get_int("image_size"));
  o.exif_apply = c.get_string("exif_orientation") == "apply";
  read_augment(c, o);
  read_normalisation(c, o);
  return o;
}

std::string auto_preset(const Source& source, int channels, int out_h, int out_w, std::string* reason) {
  auto why = [&](std::string text) {
    if (reason) *reason = std::move(text);
  };
  const std::string size = cat(out_h, "x", out_w, "x", channels);
  if (source.kind() == "synthetic") {
    why("synthetic data is never augmented");
    return "none";
  }
  if (!source.encoded() && channels == 1) {
    why(cat(size, " grayscale images (MNIST-like), which a crop or a flip would change into another class"));
    return "none";
  }
  if (std::max(out_h, out_w) <= 64) {
    why(cat(size, " images (CIFAR-sized): pad, random crop back to size, left-right flip"));
    return "padcrop";
  }
  why(cat(size, " images (ImageNet-sized): random-resized crop, colour jitter, left-right flip"));
  return "standard";
}

void apply_preset(const std::string& preset, const AugmentOverrides& v, AugmentOptions& a) {
  // As the labs define them: standard = distorted-bounding-box crop + colour distortion
  // + left-right flip; complex = standard + up-down flip; simple = standard without the
  // left-right flip; none = evaluation preprocessing. padcrop is CIFAR's recipe: pad by
  // 1/8 of the size with zeros, crop back at random, left-right flip.
  require(preset == "none" || preset == "simple" || preset == "standard" || preset == "complex" || preset == "padcrop",
          "augment preset '", preset, "' is not one of none|simple|standard|complex|padcrop");
  const bool distort = preset == "simple" || preset == "standard" || preset == "complex";
  a.random_crop = distort;
  a.color_jitter = distort;
  a.flip_lr_prob = (preset == "standard" || preset == "complex" || preset == "padcrop") ? 0.5f : 0.0f;
  a.flip_ud_prob = preset == "complex" ? 0.5f : 0.0f;
  a.crop_pad = preset == "padcrop" ? std::max(1, static_cast<int>(std::lround(std::min(a.out_h, a.out_w) / 8.0))) : 0;
  if (v.random_crop) a.random_crop = *v.random_crop;
  if (v.color_jitter) a.color_jitter = *v.color_jitter;
  if (v.flip_lr_prob) a.flip_lr_prob = *v.flip_lr_prob;
  if (v.flip_ud_prob) a.flip_ud_prob = *v.flip_ud_prob;
}

}  // namespace cohort::data
