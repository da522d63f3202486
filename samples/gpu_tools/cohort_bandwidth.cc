// cohort-bandwidth: how fast memory moves between the host and each GPU (pinned and
// pageable host memory, both directions), within a GPU, and between two GPUs (peer),
// in GB/s (1 GB = 10^9 bytes) from the mean time of --iters copies of --size bytes
// after --warmup copies, each timed with CUDA events on its own stream.
//
//   cohort-bandwidth [--size 256M] [--iters 10] [--warmup 1] [--gpu N]
//
// Exit status: 0 when it measured; 77 when no GPU is usable (nothing measured; the
// output says why); 2 for a bad flag; 1 when a CUDA call fails (named in the message).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_common.h"

namespace {

constexpr int kNoGpu = 77;

struct Args {
  size_t bytes = 256u << 20;
  int iters = 10, warmup = 1;
  int gpu = -1;  // -1: every visible GPU
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "cohort-bandwidth: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

void check(cudaError_t err, const std::string& what) {
  if (err != cudaSuccess)
    throw std::runtime_error(what + " failed: " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")");
}

size_t parse_size(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || v <= 0) usage_error("bad size '" + text + "' (examples: 64M, 256M, 1G)");
  std::string suffix = end;
  if (suffix == "K" || suffix == "k")
    v *= 1024;
  else if (suffix == "M" || suffix == "m")
    v *= 1024 * 1024;
  else if (suffix == "G" || suffix == "g")
    v *= 1024.0 * 1024 * 1024;
  else if (!suffix.empty())
    usage_error("bad size suffix in '" + text + "' (K, M or G: KiB, MiB, GiB)");
  return static_cast<size_t>(v);
}

int parse_int(const std::string& flag, const std::string& text, int min) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end || v < min || v > 1000000)
    usage_error(flag + " " + text + ": expected an integer >= " + std::to_string(min));
  return static_cast<int>(v);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("flag " + f + " needs a value");
      return argv[++i];
    };
    if (f == "--size")
      a.bytes = parse_size(value());
    else if (f == "--iters")
      a.iters = parse_int(f, value(), 1);
    else if (f == "--warmup")
      a.warmup = parse_int(f, value(), 0);
    else if (f == "--gpu")
      a.gpu = parse_int(f, value(), 0);
    else if (f == "-h" || f == "--help") {
      std::printf(
          "usage: cohort-bandwidth [--size BYTES] [--iters N] [--warmup N] [--gpu N]\n"
          "Copy bandwidth between host memory (pinned and pageable) and each GPU, within each GPU\n"
          "(D2D) and between GPUs (peer, where there are two). GB = 10^9 bytes; each row is the\n"
          "mean of --iters copies after --warmup copies, each timed with CUDA events.\n"
          "  --size BYTES  bytes per copy, with K, M or G for KiB, MiB, GiB (default 256M)\n"
          "  --iters N     timed copies per row (default 10)\n"
          "  --warmup N    untimed copies first (default 1)\n"
          "  --gpu N       only GPU N (default: every visible GPU; peer copies need two)\n"
          "Exit status: 0 measured; 77 no usable GPU (nothing measured); 2 bad flag; 1 a CUDA\n"
          "call failed.\n");
      std::exit(0);
    } else {
      usage_error("unknown flag '" + f + "'");
    }
  }
  return a;
}

// Owners of CUDA resources, so that an error on the way frees what was made.
struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer(int device, size_t bytes) {
    check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
    check(cudaMalloc(&p, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes) on cuda:" + std::to_string(device));
    check(cudaMemset(p, 1, bytes), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct PinnedBuffer {
  void* p = nullptr;
  ~PinnedBuffer() { cudaFreeHost(p); }
};

struct Stream {
  cudaStream_t s = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  explicit Stream(int device) {
    check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~Stream() {
    cudaEventDestroy(stop);
    cudaEventDestroy(start);
    cudaStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

struct Row {
  std::string copy, memory, from, to;
  double mean_ms = 0, min_ms = 0, max_ms = 0;
  std::string note;
};

// Times `copy` on a stream of `device`: warm-up copies, then each timed copy between two
// events on the stream.
Row time_copies(const Args& a, int device, const std::string& what,
                const std::function<cudaError_t(cudaStream_t)>& copy) {
  Stream st(device);
  for (int i = 0; i < a.warmup; ++i) {
    check(copy(st.s), what);
    check(cudaStreamSynchronize(st.s), "cudaStreamSynchronize after " + what);
  }
  Row r;
  r.min_ms = 1e30;
  double sum = 0;
  for (int i = 0; i < a.iters; ++i) {
    check(cudaEventRecord(st.start, st.s), "cudaEventRecord");
    check(copy(st.s), what);
    check(cudaEventRecord(st.stop, st.s), "cudaEventRecord");
    check(cudaEventSynchronize(st.stop), "cudaEventSynchronize after " + what);
    float ms = 0;
    check(cudaEventElapsedTime(&ms, st.start, st.stop), "cudaEventElapsedTime");
    sum += ms;
    r.min_ms = std::min(r.min_ms, static_cast<double>(ms));
    r.max_ms = std::max(r.max_ms, static_cast<double>(ms));
  }
  r.mean_ms = sum / a.iters;
  return r;
}

double gbps(size_t bytes, double ms) { return ms > 0 ? static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : 0; }

void print_row(const Args& a, const Row& r) {
  std::printf("%-5s %-9s %-7s %-7s %9.2f %9.3f %9.3f %9.3f  %s\n", r.copy.c_str(), r.memory.c_str(), r.from.c_str(),
              r.to.c_str(), gbps(a.bytes, r.mean_ms), r.mean_ms, r.min_ms, r.max_ms, r.note.c_str());
  std::fflush(stdout);
}

std::string cuda_name(int d) { return "cuda:" + std::to_string(d); }

// Host <-> GPU and within the GPU. Pinned host memory may be refused (a low locked-memory
// limit); the pinned rows are then left out and the output says why.
void measure_gpu(const Args& a, int device, std::vector<std::string>* not_measured) {
  DeviceBuffer src(device, a.bytes), dst(device, a.bytes);
  const std::string gpu = cuda_name(device);

  PinnedBuffer pinned;
  cudaError_t perr = cudaMallocHost(&pinned.p, a.bytes);
  if (perr != cudaSuccess) {
    cudaGetLastError();
    pinned.p = nullptr;
    not_measured->push_back("pinned H2D and D2H on " + gpu + ": cudaMallocHost(" + std::to_string(a.bytes) +
                            " bytes) failed: " + cudaGetErrorString(perr) +
                            " (raise the locked-memory limit, ulimit -l, or use a smaller --size)");
  } else {
    std::memset(pinned.p, 1, a.bytes);
  }
  std::unique_ptr<unsigned char[]> pageable(new unsigned char[a.bytes]);
  std::memset(pageable.get(), 1, a.bytes);  // touch every page before timing

  auto h2d = [&](void* host) {
    return
        [&a, &dst, host](cudaStream_t s) { return cudaMemcpyAsync(dst.p, host, a.bytes, cudaMemcpyHostToDevice, s); };
  };
  auto d2h = [&](void* host) {
    return
        [&a, &src, host](cudaStream_t s) { return cudaMemcpyAsync(host, src.p, a.bytes, cudaMemcpyDeviceToHost, s); };
  };
  if (pinned.p) {
    Row r = time_copies(a, device, "cudaMemcpyAsync (H2D, pinned)", h2d(pinned.p));
    r.copy = "H2D", r.memory = "pinned", r.from = "host", r.to = gpu;
    print_row(a, r);
  }
  Row r = time_copies(a, device, "cudaMemcpyAsync (H2D, pageable)", h2d(pageable.get()));
  r.copy = "H2D", r.memory = "pageable", r.from = "host", r.to = gpu;
  print_row(a, r);
  if (pinned.p) {
    r = time_copies(a, device, "cudaMemcpyAsync (D2H, pinned)", d2h(pinned.p));
    r.copy = "D2H", r.memory = "pinned", r.from = gpu, r.to = "host";
    print_row(a, r);
  }
  r = time_copies(a, device, "cudaMemcpyAsync (D2H, pageable)", d2h(pageable.get()));
  r.copy = "D2H", r.memory = "pageable", r.from = gpu, r.to = "host";
  print_row(a, r);
  r = time_copies(a, device, "cudaMemcpyAsync (D2D)",
                  [&](cudaStream_t s) { return cudaMemcpyAsync(dst.p, src.p, a.bytes, cudaMemcpyDeviceToDevice, s); });
  r.copy = "D2D", r.memory = "device", r.from = gpu, r.to = gpu;
  char note[96];
  std::snprintf(note, sizeof note, "each byte read and written: %.2f GB/s of memory traffic",
                2 * gbps(a.bytes, r.mean_ms));
  r.note = note;
  print_row(a, r);
}

// From GPU `from` to GPU `to`: direct where CUDA allows peer access, else CUDA stages the
// copy through host memory (the row says which).
void measure_peer(const Args& a, int from, int to) {
  int can = 0;
  check(cudaDeviceCanAccessPeer(&can, from, to), "cudaDeviceCanAccessPeer");
  if (can) {
    check(cudaSetDevice(from), "cudaSetDevice");
    cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled)
      cudaGetLastError();
    else
      check(err, "cudaDeviceEnablePeerAccess(" + std::to_string(to) + ") on cuda:" + std::to_string(from));
  }
  DeviceBuffer src(from, a.bytes), dst(to, a.bytes);
  Row r = time_copies(a, from, "cudaMemcpyPeerAsync",
                      [&](cudaStream_t s) { return cudaMemcpyPeerAsync(dst.p, to, src.p, from, a.bytes, s); });
  r.copy = "peer", r.memory = "device", r.from = cuda_name(from), r.to = cuda_name(to);
  r.note = can ? "direct (peer access)" : "staged through host memory (no peer access between these GPUs)";
  print_row(a, r);
}

int run(const Args& a) {
  std::printf("# cohort-bandwidth: %s\n", gpu_tools::versions().c_str());
  std::string why;
  const int count = gpu_tools::visible_gpus(&why);
  if (count == 0) {
    std::printf("cohort-bandwidth: no GPU: %s\n", why.c_str());
    std::printf(
        "cohort-bandwidth: not measured: H2D and D2H (pinned and pageable), D2D and peer copies: "
        "they need a GPU\n");
    return kNoGpu;
  }
  if (a.gpu >= count)
    usage_error("--gpu " + std::to_string(a.gpu) + ": there are " + std::to_string(count) + " GPUs (0.." +
                std::to_string(count - 1) + ")");
  std::vector<int> gpus;
  for (int d = 0; d < count; ++d)
    if (a.gpu < 0 || a.gpu == d) gpus.push_back(d);
  std::printf(
      "# %zu bytes (%.0f MiB) per copy; mean of %d copies after %d warm-up, each timed with CUDA events; "
      "GB = 10^9 bytes\n",
      a.bytes, static_cast<double>(a.bytes) / (1 << 20), a.iters, a.warmup);
  for (int d : gpus) std::printf("# GPU %d: %s\n", d, gpu_tools::describe_gpu(d).c_str());
  std::printf("#%-4s %-9s %-7s %-7s %9s %9s %9s %9s  %s\n", "copy", "memory", "from", "to", "GB/s", "mean ms", "min ms",
              "max ms", "note");
  std::vector<std::string> not_measured;
  for (int d : gpus) measure_gpu(a, d, &not_measured);
  if (gpus.size() >= 2) {
    for (int from : gpus)
      for (int to : gpus)
        if (from != to) measure_peer(a, from, to);
  } else if (count >= 2) {
    not_measured.push_back("peer copies between GPUs: --gpu selects one GPU (they need two)");
  } else {
    not_measured.push_back("peer copies between GPUs: one GPU is visible (they need two)");
  }
  for (const std::string& n : not_measured) std::printf("# not measured: %s\n", n.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "cohort-bandwidth: %s\n", e.what());
    return 1;
  }
}
