// allreduce_perf: measures cohort's collectives the way nccl-tests does (same flags,
// same columns, busbw per collective as nccl-tests defines it), and with --raw also
// plain MPI_Allreduce on the same buffers in the same run. --resnet50 times one step
// of ResNet-50's gradient set (161 f32 tensors submitted in backward order). With -c 1
// it checks every result, prints "# Out of bounds values : N OK|FAILED" and exits 1 when
// any value is wrong. Before the table it prints the node's memory reference: one thread
// copying 256 MiB (memcpy) while the other ranks are idle. --buffers cuda puts the
// buffers in GPU memory (DLPack kDLCUDA on each rank's collective GPU), which cohort moves
// over NCCL, as nccl-tests does; it exits 77 when some rank has no GPU for it (nothing
// measured).
//
//   mpirun -np 2 allreduce_perf -b 8 -e 512M -f 2 [-n 20] [-w 5] [-c 1] [-o sum]
//          [-d float] [-r 0] [--coll allreduce|allgather|broadcast|reducescatter|alltoall]
//          [--raw] [--resnet50] [--steps N] [--buffers host|cuda]
#include <mpi.h>
#if COHORT_ALLREDUCE_PERF_CUDA
#  include <cuda_runtime_api.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cohort/cohort.h>

namespace {

int g_rank = 0, g_size = 1;
cohort_runtime_t* g_rt = nullptr;  // destroyed before any early exit: its engine thread must not outlive MPI

[[noreturn]] void finish(int status) {
  cohort_runtime_t* rt = g_rt;
  g_rt = nullptr;
  cohort_runtime_destroy(rt);
  std::exit(status);
}

[[noreturn]] void die(const std::string& msg) {
  if (g_rank == 0) std::fprintf(stderr, "allreduce_perf: %s\n", msg.c_str());
  finish(2);
}

void check(cohort_status_t s, const char* what) {
  if (s != COHORT_OK) die(std::string(what) + " failed: " + cohort_last_error());
}

size_t parse_size(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || v < 0) die(std::string("bad size '") + text + "' (examples: 8, 64K, 512M, 1G)");
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    case '\0':
      break;
    default:
      die(std::string("bad size suffix in '") + text + "' (K, M or G)");
  }
  return static_cast<size_t>(v);
}

struct TypeInfo {
  const char* name;
  DLDataType dl;
  MPI_Datatype mpi;
};

const TypeInfo kTypes[] = {
    {"float", {kDLFloat, 32, 1}, MPI_FLOAT},
    {"half", {kDLFloat, 16, 1}, MPI_DATATYPE_NULL},
    {"bfloat16", {kDLBfloat, 16, 1}, MPI_DATATYPE_NULL},
    {"double", {kDLFloat, 64, 1}, MPI_DOUBLE},
    {"int32", {kDLInt, 32, 1}, MPI_INT32_T},
    {"int64", {kDLInt, 64, 1}, MPI_INT64_T},
    {"uint8", {kDLUInt, 8, 1}, MPI_UINT8_T},
};

struct OpInfo {
  const char* name;
  cohort_reduce_op_t op;
  MPI_Op mpi;
};
const OpInfo kOps[] = {{"sum", COHORT_REDUCE_SUM, MPI_SUM},
                       {"prod", COHORT_REDUCE_PRODUCT, MPI_PROD},
                       {"max", COHORT_REDUCE_MAX, MPI_MAX},
                       {"min", COHORT_REDUCE_MIN, MPI_MIN},
                       {"avg", COHORT_REDUCE_AVERAGE, MPI_OP_NULL}};

struct Args {
  size_t min_bytes = 32 * 1024 * 1024, max_bytes = 32 * 1024 * 1024, step_bytes = 0;
  double factor = 1;
  int iters = 20, warmup = 5, check = 1, root = 0;
  const TypeInfo* type = &kTypes[0];
  const OpInfo* op = &kOps[0];
  std::string coll = "allreduce";
  bool raw = false, resnet50 = false;
  int steps = 10;
  bool cuda = false;  // --buffers cuda
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) die("flag " + f + " needs a value");
      return argv[++i];
    };
    if (f == "-b" || f == "--minbytes")
      a.min_bytes = parse_size(value());
    else if (f == "-e" || f == "--maxbytes")
      a.max_bytes = parse_size(value());
    else if (f == "-f" || f == "--stepfactor")
      a.factor = std::atof(value());
    else if (f == "-i" || f == "--stepbytes")
      a.step_bytes = parse_size(value());
    else if (f == "-n" || f == "--iters")
      a.iters = std::atoi(value());
    else if (f == "-w" || f == "--warmup_iters")
      a.warmup = std::atoi(value());
    else if (f == "-c" || f == "--check")
      a.check = std::atoi(value());
    else if (f == "-r" || f == "--root")
      a.root = std::atoi(value());
    else if (f == "-o" || f == "--op") {
      std::string v = value();
      a.op = nullptr;
      for (const OpInfo& o : kOps)
        if (v == o.name) a.op = &o;
      if (!a.op) die("unknown op '" + v + "' (sum, prod, max, min, avg)");
    } else if (f == "-d" || f == "--datatype") {
      std::string v = value();
      a.type = nullptr;
      for (const TypeInfo& t : kTypes)
        if (v == t.name) a.type = &t;
      if (!a.type) die("unknown datatype '" + v + "' (float, half, bfloat16, double, int32, int64, uint8)");
    } else if (f == "--coll")
      a.coll = value();
    else if (f == "--raw")
      a.raw = true;
    else if (f == "--resnet50")
      a.resnet50 = true;
    else if (f == "--steps")
      a.steps = std::atoi(value());
    else if (f == "--buffers") {
      std::string v = value();
      if (v != "host" && v != "cuda") die("--buffers " + v + ": expected host or cuda");
      a.cuda = v == "cuda";
    } else if (f == "-h" || f == "--help") {
      if (g_rank == 0)
        std::printf(
            "usage: allreduce_perf -b MIN -e MAX [-f FACTOR | -i STEP] [-n ITERS] [-w WARMUP] [-c 0|1]\n"
            "  [-o sum|prod|max|min|avg] [-d float|half|bfloat16|double|int32|int64|uint8] [-r ROOT]\n"
            "  [--coll allreduce|allgather|broadcast|reducescatter|alltoall] [--raw] [--resnet50 [--steps N]]\n"
            "  [--buffers host|cuda]\n"
            "--buffers cuda: buffers in GPU memory, moved over NCCL; exit status 77 when a rank has no GPU.\n");
      finish(0);
    } else {
      die("unknown flag '" + f + "' (see --help)");
    }
  }
  if (a.iters < 1 || a.warmup < 0) die("-n must be >= 1 and -w >= 0");
  if (a.factor <= 1 && a.step_bytes == 0 && a.max_bytes > a.min_bytes) die("-f must be > 1 (or give -i)");
  if (a.coll != "allreduce" && a.coll != "allgather" && a.coll != "broadcast" && a.coll != "reducescatter" &&
      a.coll != "alltoall")
    die("unknown collective '" + a.coll + "'");
  if (a.root < 0 || a.root >= g_size) die("root " + std::to_string(a.root) + " is not a rank");
#if !COHORT_ALLREDUCE_PERF_CUDA
  if (a.cuda) die("--buffers cuda: this allreduce_perf was built without CUDA (cohort's CUDA backend)");
#endif
  if (a.cuda && a.raw)
    die("--raw times MPI_Allreduce on host memory (MPI need not be CUDA-aware): drop it with --buffers cuda");
  if (a.cuda && a.resnet50) die("--resnet50 runs on host buffers only: drop --buffers cuda");
  return a;
}

double bus_factor(const std::string& coll) {
  double n = g_size;
  if (coll == "allreduce") return 2 * (n - 1) / n;
  if (coll == "broadcast") return 1;
  return (n - 1) / n;  // allgather, reducescatter, alltoall
}

// Small integers: exact in every type for sums and products over a few ranks.
void fill(std::vector<unsigned char>& buf, const TypeInfo& t, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) {
    double v = static_cast<double>((rank + i) % 3 + 1);
    void* p = buf.data();
    if (t.dl.code == kDLFloat && t.dl.bits == 32)
      static_cast<float*>(p)[i] = static_cast<float>(v);
    else if (t.dl.code == kDLFloat && t.dl.bits == 64)
      static_cast<double*>(p)[i] = v;
    else if (t.dl.code == kDLFloat && t.dl.bits == 16) {
      const uint16_t halves[3] = {0x3c00, 0x4000, 0x4200};  // 1, 2, 3
      static_cast<uint16_t*>(p)[i] = halves[static_cast<int>(v) - 1];
    } else if (t.dl.code == kDLBfloat) {
      float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
    } else if (t.dl.code == kDLInt && t.dl.bits == 32)
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
    else if (t.dl.code == kDLInt && t.dl.bits == 64)
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
    else
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
  }
}

double read(const void* p, const TypeInfo& t, size_t i) {
  if (t.dl.code == kDLFloat && t.dl.bits == 32) return static_cast<const float*>(p)[i];
  if (t.dl.code == kDLFloat && t.dl.bits == 64) return static_cast<const double*>(p)[i];
  if (t.dl.code == kDLFloat && t.dl.bits == 16) {
    uint16_t h = static_cast<const uint16_t*>(p)[i];
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
  }
  if (t.dl.code == kDLBfloat) {
    uint32_t u = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  if (t.dl.code == kDLInt && t.dl.bits == 32) return static_cast<const int32_t*>(p)[i];
  if (t.dl.code == kDLInt && t.dl.bits == 64) return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  return static_cast<const uint8_t*>(p)[i];
}

double expected_allreduce(const Args& a, size_t i) {
  double e = a.op->op == COHORT_REDUCE_PRODUCT ? 1
             : a.op->op == COHORT_REDUCE_MIN   ? 1e30
             : a.op->op == COHORT_REDUCE_MAX   ? -1e30
                                               : 0;
  for (int r = 0; r < g_size; ++r) {
    double v = static_cast<double>((r + i) % 3 + 1);
    switch (a.op->op) {
      case COHORT_REDUCE_SUM:
      case COHORT_REDUCE_AVERAGE:
        e += v;
        break;
      case COHORT_REDUCE_PRODUCT:
        e *= v;
        break;
      case COHORT_REDUCE_MIN:
        e = std::min(e, v);
        break;
      case COHORT_REDUCE_MAX:
        e = std::max(e, v);
        break;
      case COHORT_REDUCE_MAX_ENUM:
        break;
    }
  }
  if (a.op->op == COHORT_REDUCE_AVERAGE)
    e = a.type->dl.code == kDLFloat || a.type->dl.code == kDLBfloat ? e / g_size : std::trunc(e / g_size);
  if (a.type->dl.code == kDLUInt) e = static_cast<uint8_t>(e);
  return e;
}

// --buffers cuda: device copies of a size's input and output, on this rank's collective
// GPU. fill() and check_result() work on the host vectors; upload and download move them.
struct DeviceBuffers {
  int device = -1;
  void* in = nullptr;
  void* out = nullptr;
  DeviceBuffers(int dev, size_t in_bytes, size_t out_bytes) : device(dev) {
#if COHORT_ALLREDUCE_PERF_CUDA
    cuda(cudaMalloc(&in, in_bytes), "cudaMalloc");
    cuda(cudaMalloc(&out, out_bytes), "cudaMalloc");
#endif
  }
  ~DeviceBuffers() {
#if COHORT_ALLREDUCE_PERF_CUDA
    cudaFree(in);
    cudaFree(out);
#endif
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  void upload(const std::vector<unsigned char>& host) { copy(in, host.data(), host.size()); }
  void download(const void* from, std::vector<unsigned char>& host) { copy(host.data(), from, host.size()); }
  static void copy(void* to, const void* from, size_t bytes) {
#if COHORT_ALLREDUCE_PERF_CUDA
    cuda(cudaMemcpy(to, from, bytes, cudaMemcpyDefault), "cudaMemcpy");
#endif
  }
#if COHORT_ALLREDUCE_PERF_CUDA
  static void cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) die(std::string(what) + " failed: " + cudaGetErrorString(e));
  }
#endif
};

DLTensor view(void* data, DLDevice device, const TypeInfo& t, int64_t* shape) {
  DLTensor d;
  std::memset(&d, 0, sizeof d);
  d.data = data;
  d.device = device;
  d.ndim = 1;
  d.dtype = t.dl;
  d.shape = shape;
  return d;
}

// One collective on `in` (and `out` unless in place); returns its #wrong count when checking.
// With `dev` the collective runs on its device copies instead of `in` and `out`.
struct Runner {
  cohort_runtime_t* rt;
  const Args& a;
  std::string name;
  DeviceBuffers* dev = nullptr;
  void run(std::vector<unsigned char>& in, std::vector<unsigned char>& out, size_t count, bool in_place) {
    int64_t shape[1] = {static_cast<int64_t>(count)};
    DLDevice where = dev ? DLDevice{kDLCUDA, dev->device} : DLDevice{kDLCPU, 0};
    DLTensor ti = view(dev ? dev->in : in.data(), where, *a.type, shape);
    DLTensor to = view(dev ? dev->out : out.data(), where, *a.type, shape);
    DLManagedTensor* res = nullptr;
    if (a.coll == "allreduce") {
      cohort_allreduce_options_t o;
      check(cohort_allreduce_options_default(&o), "cohort_allreduce_options_default");
      o.op = a.op->op;
      check(cohort_allreduce(rt, name.c_str(), &ti, in_place ? nullptr : &to, &o), "cohort_allreduce");
    } else if (a.coll == "broadcast") {
      check(cohort_broadcast(rt, name.c_str(), &ti, in_place ? nullptr : &to, a.root), "cohort_broadcast");
    } else if (a.coll == "allgather") {
      check(cohort_allgather(rt, name.c_str(), &ti, &res), "cohort_allgather");
    } else if (a.coll == "reducescatter") {
      check(cohort_reducescatter(rt, name.c_str(), &ti, a.op->op, &res), "cohort_reducescatter");
    } else {
      check(cohort_alltoallv(rt, name.c_str(), &ti, nullptr, 0, &res, nullptr, 0), "cohort_alltoallv");
    }
    if (res) {
      size_t n = 1;
      for (int d = 0; d < res->dl_tensor.ndim; ++d) n *= static_cast<size_t>(res->dl_tensor.shape[d]);
      size_t bytes = n * a.type->dl.bits / 8;
      if (dev) {
        DeviceBuffers::copy(dev->out, res->dl_tensor.data, bytes);  // out holds the largest result
      } else {
        if (out.size() < bytes) out.resize(bytes);
        std::memcpy(out.data(), res->dl_tensor.data, bytes);
      }
      res->deleter(res);
    }
  }
};

// Per-rank count (elements in each rank's input) for a buffer of `bytes` (nccl-tests' S).
size_t input_count(const Args& a, size_t bytes) {
  size_t esize = a.type->dl.bits / 8;
  size_t count = bytes / esize;
  if (a.coll == "allgather") count /= static_cast<size_t>(g_size);  // S is the gathered size
  if (a.coll == "alltoall" || a.coll == "reducescatter") count -= count % static_cast<size_t>(g_size);
  return count;
}

int64_t check_result(const Args& a, const std::vector<unsigned char>& result, size_t count) {
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double e;
    if (a.coll == "allreduce") {
      e = expected_allreduce(a, i);
    } else if (a.coll == "broadcast") {
      e = static_cast<double>((a.root + i) % 3 + 1);
    } else if (a.coll == "allgather") {
      size_t per = count / static_cast<size_t>(g_size);
      e = static_cast<double>((i / per + i % per) % 3 + 1);
    } else if (a.coll == "reducescatter") {
      size_t per = count / static_cast<size_t>(g_size);
      size_t k = static_cast<size_t>(g_rank) * per + i;
      if (i >= per) break;
      Args s = a;
      e = expected_allreduce(s, k);
    } else {  // alltoall: block r came from rank r, element index rank*per + j
      size_t per = count / static_cast<size_t>(g_size);
      size_t r = i / per, j = i % per;
      e = static_cast<double>((r + static_cast<size_t>(g_rank) * per + j) % 3 + 1);
    }
    double got = read(result.data(), *a.type, i);
    double tol = a.type->dl.bits == 16 ? 0.02 * std::fabs(e) : 1e-6 * std::fabs(e);
    if (std::fabs(got - e) > tol) ++wrong;
  }
  return wrong;
}

double max_over_ranks(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// Time per call in microseconds: warm-up, then iters calls, slowest rank.
template <typename Fn>
double time_us(const Args& a, Fn fn) {
  for (int i = 0; i < a.warmup; ++i) fn();
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < a.iters; ++i) fn();
  double t = (MPI_Wtime() - t0) / a.iters * 1e6;
  return max_over_ranks(t);
}

// The memory bandwidth a collective on this node is measured against: rank 0 copies
// 256 MiB between two buffers it has touched first (memcpy, page-aligned), best of 7 in
// GB/s of bytes copied, while the other ranks wait asleep (an MPI barrier would poll a core).
double memcpy_reference_gbps() {
  constexpr size_t kBytes = size_t{256} << 20;
  double best = 0;
  if (g_rank == 0) {
    void* src = nullptr;
    void* dst = nullptr;
    if (posix_memalign(&src, 4096, kBytes) != 0 || posix_memalign(&dst, 4096, kBytes) != 0)
      die("out of memory for the memcpy reference (2 x 256 MiB)");
    std::memset(src, 1, kBytes);
    std::memset(dst, 2, kBytes);
    for (int i = 0; i < 7; ++i) {
      const double t0 = MPI_Wtime();
      std::memcpy(dst, src, kBytes);
      best = std::max(best, static_cast<double>(kBytes) / (MPI_Wtime() - t0) / 1e9);
    }
    std::free(src);
    std::free(dst);
  }
  MPI_Request done;
  MPI_Ibarrier(MPI_COMM_WORLD, &done);
  for (int finished = 0; MPI_Test(&done, &finished, MPI_STATUS_IGNORE), !finished;) usleep(1000);
  return best;
}

// Returns the number of wrong values over every size and rank (with -c). With device >= 0
// the buffers are on that GPU and `note` says so in the header.
int64_t run_sizes(cohort_runtime_t* rt, const Args& a, int device, const std::string& note) {
  size_t esize = a.type->dl.bits / 8;
  bool reduces = a.coll == "allreduce" || a.coll == "reducescatter";
  bool rooted = a.coll == "broadcast";
  bool can_in_place = a.coll == "allreduce" || a.coll == "broadcast";
  const double reference = memcpy_reference_gbps();
  if (g_rank == 0) {
    std::printf("# cohort %s, %d ranks, collective %s\n", cohort_version_string(), g_size, a.coll.c_str());
    std::printf(
        "# memcpy reference: one thread copies 256 MiB (buffers touched first, other ranks idle), "
        "best of 7: %.2f GB/s\n",
        reference);
    if (!note.empty()) std::printf("%s", note.c_str());
    std::printf("#%88s%s\n", "out-of-place                       in-place          ",
                a.raw ? "   raw MPI_Allreduce (in place)" : "");
    std::printf("#%11s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s%s\n", "size", "count", "type", "redop", "root",
                "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong",
                a.raw ? "     time   busbw  ratio" : "");
    std::printf("#%11s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s%s\n", "(B)", "(elements)", "", "", "", "(us)",
                "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", a.raw ? "     (us)  (GB/s)  (x raw)" : "");
  }
  double bw_sum = 0;
  int bw_n = 0;
  int64_t wrong_here = 0;
  for (size_t bytes = a.min_bytes; bytes <= a.max_bytes;
       bytes = a.step_bytes ? bytes + a.step_bytes : std::max(bytes + 1, static_cast<size_t>(bytes * a.factor))) {
    size_t count = input_count(a, bytes);
    size_t total = a.coll == "allgather" ? count * static_cast<size_t>(g_size) : count;
    std::vector<unsigned char> in(std::max<size_t>(count * esize, 1)), out(std::max<size_t>(total * esize, 1));
    std::unique_ptr<DeviceBuffers> dev;
    if (device >= 0) dev = std::make_unique<DeviceBuffers>(device, in.size(), out.size());
    Runner runner{rt, a, "perf." + a.coll + "." + std::to_string(bytes), dev.get()};
    // The input, written on the host and copied to the device; a result, read back.
    auto refill = [&] {
      fill(in, *a.type, count, g_rank);
      if (dev) dev->upload(in);
    };
    auto result = [&](std::vector<unsigned char>& host, bool in_place) -> std::vector<unsigned char>& {
      if (dev) dev->download(in_place ? dev->in : dev->out, host);
      return host;
    };
    double result_bytes = static_cast<double>(total * esize);
    double t_oop, t_ip = 0;
    int64_t wrong_oop = 0, wrong_ip = -1;
    refill();
    t_oop = time_us(a, [&] { runner.run(in, out, count, false); });
    if (a.check) {
      refill();
      runner.run(in, out, count, false);
      wrong_oop = check_result(a, result(out, false), a.coll == "allgather" ? total : count);
    }
    if (can_in_place) {
      refill();
      t_ip = time_us(a, [&] { runner.run(in, in, count, true); });
      if (a.check) {
        refill();
        runner.run(in, in, count, true);
        wrong_ip = check_result(a, result(in, true), count);
      }
    }
    wrong_here += wrong_oop + std::max<int64_t>(wrong_ip, 0);
    double algbw = result_bytes / (t_oop * 1e-6) / 1e9, busbw = algbw * bus_factor(a.coll);
    double algbw_ip = t_ip > 0 ? result_bytes / (t_ip * 1e-6) / 1e9 : 0, busbw_ip = algbw_ip * bus_factor(a.coll);
    bw_sum += busbw;
    ++bw_n;
    std::string raw_cols;
    if (a.raw && a.coll == "allreduce" && a.type->mpi != MPI_DATATYPE_NULL && a.op->mpi != MPI_OP_NULL) {
      fill(in, *a.type, count, g_rank);
      double t_raw = time_us(a, [&] {
        MPI_Allreduce(MPI_IN_PLACE, in.data(), static_cast<int>(count), a.type->mpi, a.op->mpi, MPI_COMM_WORLD);
      });
      double raw_bus = result_bytes / (t_raw * 1e-6) / 1e9 * bus_factor(a.coll);
      char buf[96];
      // The raw call runs in place: compare it with cohort's in-place time.
      std::snprintf(buf, sizeof buf, " %8.2f %7.2f %6.2f", t_raw, raw_bus, raw_bus > 0 ? busbw_ip / raw_bus : 0);
      raw_cols = buf;
    }
    if (g_rank == 0) {
      char ip[64];
      if (can_in_place)
        std::snprintf(ip, sizeof ip, "%8.2f %7.2f %7.2f %6lld", t_ip, algbw_ip, busbw_ip,
                      static_cast<long long>(wrong_ip < 0 ? 0 : wrong_ip));
      else
        std::snprintf(ip, sizeof ip, "%8s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
      std::printf(" %11zu %13zu %9s %7s %6d %8.2f %7.2f %7.2f %6lld %s%s\n", bytes, total, a.type->name,
                  reduces ? a.op->name : "none", rooted ? a.root : -1, t_oop, algbw, busbw,
                  static_cast<long long>(wrong_oop), ip, raw_cols.c_str());
      std::fflush(stdout);
    }
    if (a.max_bytes == 0) break;
  }
  if (g_rank == 0) std::printf("# Avg bus bandwidth    : %g \n", bw_n ? bw_sum / bw_n : 0.0);
  int64_t wrong = 0;
  MPI_Allreduce(&wrong_here, &wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0 && a.check)
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong ? "FAILED" : "OK");
  return wrong;
}

// ResNet-50 (torchvision, v1.5) parameter tensors in forward order; 25,557,032 values.
std::vector<size_t> resnet50_sizes() {
  std::vector<size_t> s;
  auto conv = [&](size_t out, size_t in, size_t k) { s.push_back(out * in * k * k); };
  auto bn = [&](size_t c) {
    s.push_back(c);
    s.push_back(c);
  };
  conv(64, 3, 7);
  bn(64);
  size_t inplanes = 64;
  const size_t planes[4] = {64, 128, 256, 512}, blocks[4] = {3, 4, 6, 3};
  for (int l = 0; l < 4; ++l) {
    for (size_t b = 0; b < blocks[l]; ++b) {
      size_t p = planes[l];
      conv(p, inplanes, 1);
      bn(p);
      conv(p, p, 3);
      bn(p);
      conv(p * 4, p, 1);
      bn(p * 4);
      if (b == 0) {
        conv(p * 4, inplanes, 1);
        bn(p * 4);
      }
      inplanes = p * 4;
    }
  }
  s.push_back(1000 * 2048);
  s.push_back(1000);
  return s;
}

void run_resnet50(cohort_runtime_t* rt, const Args& a) {
  std::vector<size_t> sizes = resnet50_sizes();
  size_t total = 0;
  for (size_t n : sizes) total += n;
  if (sizes.size() != 161 || total != 25557032) die("internal: ResNet-50 gradient set is wrong");
  std::vector<std::vector<float>> grads;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t n : sizes) {
    grads.emplace_back(n, 1.0f);
    shapes.push_back({static_cast<int64_t>(n)});
  }
  std::vector<float> flat(total, 1.0f);
  std::vector<std::string> names;
  for (size_t i = 0; i < sizes.size(); ++i) names.push_back("resnet50.grad." + std::to_string(i));
  cohort_allreduce_options_t opts;
  check(cohort_allreduce_options_default(&opts), "cohort_allreduce_options_default");
  // A plain sum, the same operation as the raw MPI_Allreduce it is compared with (an
  // average adds one scaling pass over the gradients on top).
  opts.op = COHORT_REDUCE_SUM;
  std::vector<double> step_ms, raw_ms;
  for (int step = -2; step < a.steps; ++step) {
    // Interleave: one cohort step, one raw MPI_Allreduce of the same bytes.
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    std::vector<cohort_request_t*> reqs;
    for (size_t k = sizes.size(); k-- > 0;) {  // backward order: last layer first
      DLTensor t;
      std::memset(&t, 0, sizeof t);
      t.data = grads[k].data();
      t.device = {kDLCPU, 0};
      t.ndim = 1;
      t.dtype = kTypes[0].dl;
      t.shape = shapes[k].data();
      cohort_request_t* r = nullptr;
      check(cohort_allreduce_async(rt, names[k].c_str(), &t, nullptr, &opts, &r), "cohort_allreduce_async");
      reqs.push_back(r);
    }
    for (cohort_request_t* r : reqs) {
      check(cohort_request_wait(r), "cohort_request_wait");
      cohort_request_destroy(r);
    }
    double t1 = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    double t2 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(total), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t3 = MPI_Wtime();
    double c = max_over_ranks((t1 - t0) * 1e3), r = max_over_ranks((t3 - t2) * 1e3);
    if (step >= 0) {
      step_ms.push_back(c);
      raw_ms.push_back(r);
    }
  }
  std::sort(step_ms.begin(), step_ms.end());
  std::sort(raw_ms.begin(), raw_ms.end());
  double cm = step_ms[step_ms.size() / 2], rm = raw_ms[raw_ms.size() / 2];
  if (g_rank == 0)
    std::printf(
        "resnet50 gradient set: %zu tensors, %zu values (%.1f MB), %d ranks: cohort step %.2f ms (median of %d), "
        "one raw MPI_Allreduce %.2f ms, ratio %.3f\n",
        sizes.size(), total, total * 4 / 1e6, g_size, cm, a.steps, rm, cm / rm);
}

// --buffers cuda: this rank's GPU for collectives of CUDA tensors, or -1 with *why.
int collective_gpu(cohort_runtime_t* rt, std::string* why) {
  cohort_runtime_info_t info{};
  info.struct_size = sizeof info;
  check(cohort_runtime_info(rt, &info), "cohort_runtime_info");
  if (info.collective_device_id >= 0) return info.collective_device_id;
  cohort_build_info_t build{};
  build.struct_size = sizeof build;
  check(cohort_build_info(&build), "cohort_build_info");
  if (!build.cuda_built)
    *why = "this cohort was built without CUDA";
  else if (info.cuda_device_count == 0)
    *why = std::string("no GPU (") + (*build.gpu_note ? build.gpu_note : "none visible") + ")";
  else
    *why = "the runtime was made with --device=cpu (use --device=auto)";
  return -1;
}

// The header lines of --buffers cuda (rank 0 prints them).
std::string buffers_note(int device) {
  cohort_gpu_info_t gpu{};
  gpu.struct_size = sizeof gpu;
  std::string name = cohort_build_gpu_info(device, &gpu) == COHORT_OK ? std::string(" (") + gpu.name + ")" : "";
  std::string note = "# buffers: GPU memory (kDLCUDA) on each rank's collective GPU, moved over NCCL; rank 0: cuda:" +
                     std::to_string(device) + name + "\n";
  if (g_size == 1)
    note +=
        "# one rank on one GPU: NCCL only copies within the GPU, so this proves the path (cohort's collectives "
        "on device buffers through NCCL) and measures no link between GPUs\n";
  return note;
}

}  // namespace

int main(int argc, char** argv) {
  cohort_config_t* cfg = nullptr;
  check(cohort_config_create(&cfg), "cohort_config_create");
  std::vector<char*> rest(static_cast<size_t>(argc) + 1);
  int rest_argc = 0;
  check(cohort_config_parse_args(cfg, argc, argv, 0, &rest_argc, rest.data()), "reading the command line");
  cohort_runtime_t* rt = nullptr;
  check(cohort_runtime_create(cfg, &rt), "cohort_runtime_create");
  g_rt = rt;
  cohort_config_destroy(cfg);
  check(cohort_runtime_rank(rt, &g_rank), "cohort_runtime_rank");
  check(cohort_runtime_size(rt, &g_size), "cohort_runtime_size");
  Args a = parse(rest_argc, rest.data());
  int device = -1;
  if (a.cuda) {
    std::string why;
    device = collective_gpu(rt, &why);
    int ok = device >= 0, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
      if (!ok)
        std::fprintf(stderr, "allreduce_perf: rank %d: --buffers cuda: nothing measured: %s\n", g_rank, why.c_str());
      finish(77);  // as a skipped test: nothing could be measured here
    }
#if COHORT_ALLREDUCE_PERF_CUDA
    DeviceBuffers::cuda(cudaSetDevice(device), "cudaSetDevice");
#endif
  }
  int64_t wrong = 0;
  if (a.resnet50)
    run_resnet50(rt, a);
  else
    wrong = run_sizes(rt, a, device, a.cuda ? buffers_note(device) : "");
  finish(wrong ? 1 : 0);  // as nccl-tests: a failed check (-c) fails the run
}
