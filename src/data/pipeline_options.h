// The input pipeline's options: what the registry's data group (and seed, image_size,
// data_format, num_classes) says, read once into a value the pipeline owns, and the
// augmentation presets the pipeline applies once it knows its source.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "data/augment.h"
#include "data/jpeg.h"
#include "data/source.h"
#include "tensor/allocator.h"
#include "tensor/device.h"

namespace cohort {
class Config;
}

namespace cohort::data {

// Augmentation steps set explicitly (API, command line or environment): they win over
// the preset, augment=auto included.
struct AugmentOverrides {
  std::optional<bool> random_crop, color_jitter;
  std::optional<float> flip_lr_prob, flip_ud_prob;
};

struct PipelineOptions {
  SourceOptions source;
  AugmentOptions augment;
  int64_t batch_size = 64;
  int rank = 0, size = 1;
  bool shuffle = true;
  bool drop_remainder = false;
  int reader_threads = 1, decode_threads = 1, prefetch_depth = 2;
  JpegDct dct = JpegDct::kFast;
  uint64_t max_pixels = 100000000;
  OnError on_error = OnError::kSkip;
  // Under on_error=skip: the most samples that may be skipped, as a fraction of those
  // read; an epoch in which every sample is bad fails whatever its value.
  double max_skipped_fraction = 0.01;
  int error_log_limit = 5;
  bool exif_apply = false;  // exif_orientation=apply
  int64_t start_epoch = 0, start_step = 0;
  int image_size = 0;  // 0: 224 for JPEG sources, the native size for raw ones
  int synthetic_channels = 3;
  // auto|none|simple|standard|complex|padcrop; the pipeline resolves auto and applies
  // the preset, then the overrides, to `augment`.
  std::string preset = "auto";
  AugmentOverrides overrides;
  bool explicit_mean = false, explicit_std = false;
  // Where the batches' memory comes from (null: plain host memory); pinned host memory
  // when they are copied on to a device.
  std::shared_ptr<Allocator> batch_memory;
  // A device the batches are copied to while the consumer computes (device_feed.h), the
  // allocator of its memory and the consumer's stream; the host (default): no copy.
  Device feed_device;
  std::shared_ptr<Allocator> device_memory;
  Stream feed_stream;
};

// What augment=auto picks for a source whose batches hold channels x out_h x out_w
// images: none for synthetic data (never augmented) and for grayscale raw images (MNIST
// and its kin, where a flip or a crop changes the class or loses the digit), padcrop for
// images of at most 64 pixels a side (CIFAR-sized), standard for larger ones
// (ImageNet-sized). *reason (optional) receives why.
std::string auto_preset(const Source& source, int channels, int out_h, int out_w, std::string* reason = nullptr);

// Sets the augmentation steps of a preset (not auto), then the overrides. padcrop pads
// by 1/8 of the output size.
void apply_preset(const std::string& preset, const AugmentOverrides& overrides, AugmentOptions& a);

// Options from the registry (data group, plus seed, image_size, data_format and
// num_classes). Thread counts of 0 take their defaults from thread_budget.
PipelineOptions pipeline_options(const Config& config, int rank, int size, int thread_budget);

}  // namespace cohort::data
