// Pipeline throughput on ImageNet-sized JPEGs: decode + random-resized-crop(224) +
// flip + normalise (f32 NCHW) on 1 and 2 decode threads, beside libjpeg-turbo's full
// decode of the same files and the torchvision/PIL pipeline, median of 3 interleaved
// runs; a fresh pipeline's first epoch (every file verified) against its later ones.
// Then a consumer with a synthetic cost shows how long it waits for data.
//
// usage: data_pipeline_bench PHOTO_DIR [PEER_SCRIPT]   (PHOTO_DIR/photos/*.jpg)
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include "core/config.h"
#include "data/file.h"
#include "data/pipeline.h"

using namespace cohort;
using namespace cohort::data;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU seconds used by the whole process: robust to other jobs on a shared machine.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Rate {
  double wall = 0;  // images per second
  double cpu = 0;   // images per CPU-second (all threads of the process)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// libjpeg-turbo full decode to RGB, default (accurate) and fast IDCT, one thread.
Rate raw_decode_rate(const std::vector<std::vector<uint8_t>>& files, bool fast, double seconds) {
  jpeg_decompress_struct d{};
  jpeg_error_mgr err{};
  d.err = jpeg_std_error(&err);
  jpeg_create_decompress(&d);
  std::vector<uint8_t> row(8192 * 3);
  int64_t n = 0;
  double t0 = now(), c0 = cpu_now();
  while (now() - t0 < seconds) {
    for (const auto& f : files) {
      jpeg_mem_src(&d, f.data(), f.size());
      jpeg_read_header(&d, TRUE);
      d.out_color_space = JCS_RGB;
      d.dct_method = fast ? JDCT_IFAST : JDCT_ISLOW;
      jpeg_start_decompress(&d);
      JSAMPROW r = row.data();
      while (d.output_scanline < d.output_height) jpeg_read_scanlines(&d, &r, 1);
      jpeg_finish_decompress(&d);
      ++n;
    }
  }
  Rate rate{static_cast<double>(n) / (now() - t0), static_cast<double>(n) / (cpu_now() - c0)};
  jpeg_destroy_decompress(&d);
  return rate;
}

PipelineOptions bench_options(const std::string& dir, int threads, int prefetch) {
  Config c;
  c.set("data_dir", dir);
  c.set("batch_size", "32");
  c.set("augment", "standard");
  c.set("color_jitter", "false");  // decode + random-resized-crop + flip + normalise
  c.set("image_dtype", "f32");
  c.set("decode_threads", std::to_string(threads));
  c.set("reader_threads", "1");
  c.set("prefetch_depth", std::to_string(prefetch));
  return pipeline_options(c, 0, 1, threads);
}

Rate pipeline_rate(const std::string& dir, int threads, double seconds) {
  auto o = bench_options(dir, threads, 4);
  Pipeline p(o, open_source(o.source));
  for (int i = 0; i < 3; ++i) p.next();  // warm-up: threads started, buffers grown
  int64_t images = 0;
  double t0 = now(), c0 = cpu_now();
  while (now() - t0 < seconds) images += p.next().valid;
  return {static_cast<double>(images) / (now() - t0), static_cast<double>(images) / (cpu_now() - c0)};
}

// A fresh pipeline's first epoch, in which every JPEG is verified (its whole
// entropy-coded data decoded once, whatever the crop), against its next two epochs,
// whose verdicts are cached: images per second, 1 decode thread, start-up included in
// neither (the first batch is taken before the clock starts, in both).
struct EpochRates {
  double first = 0, later = 0;
};

EpochRates epoch_rates(const std::string& dir) {
  auto o = bench_options(dir, 1, 1);
  Pipeline p(o, open_source(o.source));
  const int64_t steps = p.steps_per_epoch();
  auto time_epoch = [&](bool first) {
    int64_t images = 0;
    if (first) p.next();  // threads started, buffers grown
    double t0 = now();
    for (int64_t s = first ? 1 : 0; s < steps; ++s) images += p.next().valid;
    return static_cast<double>(images) / (now() - t0);
  };
  EpochRates r;
  r.first = time_epoch(true);
  r.later = (time_epoch(false) + time_epoch(false)) / 2;
  return r;
}

Rate peer_rate(const std::string& script, const std::string& dir, double seconds) {
  std::string cmd =
      "timeout 120 /usr/bin/python3 " + script + " " + dir + " " + std::to_string(seconds) + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {};
  char buf[128] = {0};
  Rate rate;
  if (std::fgets(buf, sizeof buf, p)) std::sscanf(buf, "%lf %lf", &rate.wall, &rate.cpu);
  ::pclose(p);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PHOTO_DIR [PEER_SCRIPT]\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  std::string peer = argc > 2 ? argv[2] : "";
  std::vector<std::vector<uint8_t>> files;
  for (const auto& name : list_directory(dir + "/photos")) files.push_back(read_file(dir + "/photos/" + name));
  if (files.empty()) {
    std::printf("SKIPPED: no photos in %s/photos\n", dir.c_str());
    return 77;
  }
  const double secs = 2.0;
  enum { kRawSlow, kRawFast, kOne, kTwo, kTorch, kColumns };
  std::vector<double> wall[kColumns], cpu[kColumns];
  for (int rep = 0; rep < 3; ++rep) {  // interleaved, so drift hits every column alike
    Rate r[kColumns] = {raw_decode_rate(files, false, secs), raw_decode_rate(files, true, secs),
                        pipeline_rate(dir, 1, secs), pipeline_rate(dir, 2, secs),
                        peer.empty() ? Rate{} : peer_rate(peer, dir, secs)};
    for (int k = 0; k < kColumns; ++k) {
      wall[k].push_back(r[k].wall);
      cpu[k].push_back(r[k].cpu);
    }
  }
  double w[kColumns], c[kColumns];
  for (int k = 0; k < kColumns; ++k) {
    w[k] = median(wall[k]);
    c[k] = median(cpu[k]);
  }
  const char* names[kColumns] = {"libjpeg-turbo full decode, accurate IDCT, 1 thread",
                                 "libjpeg-turbo full decode, fast IDCT, 1 thread",
                                 "cohort decode+RRC(224)+flip+normalise, 1 decode thread",
                                 "cohort decode+RRC(224)+flip+normalise, 2 decode threads",
                                 "torchvision/PIL RRC(224)+flip+ToTensor+Normalize, 1 thread"};
  std::printf("%zu JPEGs (~500x375 q90) from %s, median of 3 interleaved runs of %.0f s\n", files.size(), dir.c_str(),
              secs);
  std::printf("%-58s %10s %14s\n", "pipeline", "images/s", "images/CPU-s");
  for (int k = 0; k < kColumns; ++k)
    if (w[k] > 0) std::printf("%-58s %10.0f %14.0f\n", names[k], w[k], c[k]);
  std::printf("ratios (wall; per CPU-second in brackets):\n");
  std::printf("  cohort 1t / full decode, fast IDCT = %.2f [%.2f]; / accurate IDCT = %.2f [%.2f]  (goal >= 0.9)\n",
              w[kOne] / w[kRawFast], c[kOne] / c[kRawFast], w[kOne] / w[kRawSlow], c[kOne] / c[kRawSlow]);
  std::printf("  cohort 2t / cohort 1t = %.2f  (goal >= 1.8; needs 2 idle cores)\n", w[kTwo] / w[kOne]);
  if (w[kTorch] > 0)
    std::printf("  cohort 1t / torchvision 1t = %.2f [%.2f]  (goal >= 3)\n", w[kOne] / w[kTorch], c[kOne] / c[kTorch]);
  const double c1 = w[kOne];

  std::vector<double> first, later;
  for (int rep = 0; rep < 3; ++rep) {
    auto e = epoch_rates(dir);
    first.push_back(e.first);
    later.push_back(e.later);
  }
  std::printf("%-58s %10.0f\n", "cohort first epoch, every JPEG verified, 1 decode thread", median(first));
  std::printf("%-58s %10.0f\n", "cohort later epochs, verdicts cached, 1 decode thread", median(later));
  std::printf("  first epoch / later epochs = %.2f  (the cost of verifying each file once)\n",
              median(first) / median(later));

  // A consumer that takes 1.25x what one batch takes the pool: with prefetch it
  // should almost never wait.
  double batch_s = 32.0 / c1 * 1.25;
  auto o = bench_options(dir, 1, 2);
  Pipeline p(o, open_source(o.source));
  for (int i = 0; i < 3; ++i) p.next();
  // Steady state: the warm-up drained the ring; a consumer slower than the pool finds
  // it full again after a few of its steps, which is what the goal is about.
  std::this_thread::sleep_for(std::chrono::duration<double>(3 * batch_s));
  auto before = p.stats();
  for (int i = 0; i < 60; ++i) {
    p.next();
    // The consumer's cost is time the CPU is free, as when a GPU runs the step.
    std::this_thread::sleep_for(std::chrono::duration<double>(batch_s));
  }
  auto after = p.stats();
  double wait = (after.wait_s - before.wait_s) / (after.elapsed_s - before.elapsed_s);
  std::printf(
      "consumer costing %.1f ms/batch, prefetch_depth 2, 1 decode thread: waited %.2f%% of the time (goal < 1%%)\n",
      batch_s * 1e3, wait * 100);
  std::printf("verdict: %s\n", after.verdict.c_str());
  return 0;
}
