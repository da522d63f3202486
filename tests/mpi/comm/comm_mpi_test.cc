// Multi-rank tests of the collectives through the public C API over MPI: hundreds of
// tensors in a different random order per rank, fusion, tensors larger than the
// fusion buffer, zero-size tensors, repeated names (cache), mismatch errors on every
// rank, every op and dtype against a reference, join with uneven steps, stall
// shutdown and the merged timeline. Exit status 0 = every check passed on this rank.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cohort/cohort.h>

#include "support/rank_check.h"

namespace {

int g_rank = 0, g_size = 1;

struct Buffer {
  std::vector<unsigned char> bytes;
  std::vector<int64_t> shape;
  DLTensor t{};
  Buffer(DLDataType dtype, std::vector<int64_t> dims) : shape(std::move(dims)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes.assign(static_cast<size_t>(n) * (dtype.bits / 8) + 1, 0);
    t.data = bytes.data();
    t.device = {kDLCPU, 0};
    t.ndim = static_cast<int>(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
  }
  Buffer(const Buffer&) = delete;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  float* f32() { return reinterpret_cast<float*>(bytes.data()); }
};

const DLDataType kF32{kDLFloat, 32, 1}, kF64{kDLFloat, 64, 1}, kF16{kDLFloat, 16, 1}, kBF16{kDLBfloat, 16, 1},
    kI32{kDLInt, 32, 1}, kI64{kDLInt, 64, 1}, kU8{kDLUInt, 8, 1};

// Independent reference conversions (not cohort's kernels).
float from_half(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(static_cast<float>(m + 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}
uint16_t to_half_exact(float f) {  // small integers only
  for (uint32_t h = 0; h < 0x10000; ++h)
    if (((h >> 10) & 31) != 31 && from_half(static_cast<uint16_t>(h)) == f) return static_cast<uint16_t>(h);
  return 0;
}
float from_bf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t to_bf16_exact(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

void put(Buffer& b, int64_t i, double v) {
  void* p = b.bytes.data();
  DLDataType d = b.t.dtype;
  if (d.code == kDLFloat && d.bits == 32) static_cast<float*>(p)[i] = static_cast<float>(v);
  if (d.code == kDLFloat && d.bits == 64) static_cast<double*>(p)[i] = v;
  if (d.code == kDLFloat && d.bits == 16) static_cast<uint16_t*>(p)[i] = to_half_exact(static_cast<float>(v));
  if (d.code == kDLBfloat) static_cast<uint16_t*>(p)[i] = to_bf16_exact(static_cast<float>(v));
  if (d.code == kDLInt && d.bits == 32) static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
  if (d.code == kDLInt && d.bits == 64) static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
  if (d.code == kDLUInt) static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
}

double at(const DLTensor& t, int64_t i) {
  const void* p = static_cast<const char*>(t.data) + t.byte_offset;
  DLDataType d = t.dtype;
  if (d.code == kDLFloat && d.bits == 32) return static_cast<const float*>(p)[i];
  if (d.code == kDLFloat && d.bits == 64) return static_cast<const double*>(p)[i];
  if (d.code == kDLFloat && d.bits == 16) return from_half(static_cast<const uint16_t*>(p)[i]);
  if (d.code == kDLBfloat) return from_bf16(static_cast<const uint16_t*>(p)[i]);
  if (d.code == kDLInt && d.bits == 32) return static_cast<const int32_t*>(p)[i];
  if (d.code == kDLInt && d.bits == 64) return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  return static_cast<const uint8_t*>(p)[i];
}

double value(int rank, int64_t i, bool nonneg) {
  int64_t v = (rank * 3 + i * 7 + 1) % 5;
  return nonneg ? static_cast<double>(v) : static_cast<double>(v - 2);
}

cohort_runtime_t* make_runtime(const std::vector<std::pair<const char*, const char*>>& options) {
  cohort_config_t* cfg = nullptr;
  cohort_runtime_t* rt = nullptr;
  OK(cohort_config_create(&cfg));
  for (auto& [k, v] : options) OK(cohort_config_set(cfg, k, v));
  OK(cohort_runtime_create(cfg, &rt));
  cohort_config_destroy(cfg);
  return rt;
}

void test_random_order_fusion_and_big(cohort_runtime_t* rt) {
  const int count = 300;
  std::vector<int> order(count);
  for (int i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937 rng(static_cast<unsigned>(1234 + g_rank * 77));
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::unique_ptr<Buffer>> bufs(count);
  std::vector<cohort_request_t*> reqs;
  for (int i : order) {
    // Every 50th tensor is bigger than the 1 MiB fusion buffer; every 37th is empty.
    int64_t n = i % 50 == 0 ? 400000 : i % 37 == 0 ? 0 : 1 + i % 23;
    bufs[static_cast<size_t>(i)] = std::make_unique<Buffer>(kF32, std::vector<int64_t>{n});
    Buffer& b = *bufs[static_cast<size_t>(i)];
    for (int64_t k = 0; k < n; ++k) put(b, k, value(g_rank + i, k, false));
    cohort_request_t* r = nullptr;
    std::string name = "grad." + std::to_string(i);
    OK(cohort_allreduce_async(rt, name.c_str(), &b.t, nullptr, nullptr, &r));
    reqs.push_back(r);
  }
  for (cohort_request_t* r : reqs) {
    OK(cohort_request_wait(r));
    cohort_request_destroy(r);
  }
  for (int i = 0; i < count; ++i) {
    Buffer& b = *bufs[static_cast<size_t>(i)];
    for (int64_t k = 0; k < b.numel(); k += 1 + b.numel() / 50) {
      double expect = 0;
      for (int r = 0; r < g_size; ++r) expect += value(r + i, k, false);
      CHECK(at(b.t, k) == expect, "tensor %d element %lld: %g != %g", i, static_cast<long long>(k), at(b.t, k), expect);
    }
  }
}

void test_repeated_names(cohort_runtime_t* rt) {
  for (int step = 0; step < 5; ++step) {
    std::vector<std::unique_ptr<Buffer>> bufs;
    std::vector<const char*> names;
    std::vector<DLTensor*> inputs;
    std::vector<std::string> storage;
    for (int i = 0; i < 40; ++i) storage.push_back("layer." + std::to_string(i));
    for (int i = 0; i < 40; ++i) {
      bufs.push_back(std::make_unique<Buffer>(kF32, std::vector<int64_t>{8}));
      for (int64_t k = 0; k < 8; ++k) put(*bufs.back(), k, value(g_rank + step, k, false));
      names.push_back(storage[static_cast<size_t>(i)].c_str());
      inputs.push_back(&bufs.back()->t);
    }
    cohort_allreduce_options_t opts;
    OK(cohort_allreduce_options_default(&opts));
    opts.op = COHORT_REDUCE_AVERAGE;
    OK(cohort_grouped_allreduce(rt, names.size(), names.data(), inputs.data(), nullptr, &opts));
    for (auto& b : bufs) {
      double expect = 0;
      for (int r = 0; r < g_size; ++r) expect += value(r + step, 3, false);
      CHECK(std::fabs(at(b->t, 3) - expect / g_size) < 1e-6, "step %d average %g != %g", step, at(b->t, 3),
            expect / g_size);
    }
  }
}

void test_mismatch(cohort_runtime_t* rt) {
  Buffer b(kF32, {g_rank == 1 ? 5 : 4});
  cohort_status_t s = cohort_allreduce(rt, "mismatched", &b.t, nullptr, nullptr);
  CHECK(s == COHORT_ERR_MISMATCH, "status %d", s);
  std::string msg = cohort_last_error();
  CHECK(msg.find("'mismatched'") != std::string::npos &&
            msg.find("rank 1: allreduce sum f32[5]") != std::string::npos &&
            msg.find("rank 0: allreduce sum f32[4]") != std::string::npos,
        "message: %s", msg.c_str());
  Buffer d(g_rank == 0 ? kF64 : kF32, {4});
  CHECK(cohort_allreduce(rt, "dtype_mismatch", &d.t, nullptr, nullptr) == COHORT_ERR_MISMATCH, "%s",
        cohort_last_error());
  Buffer r(kF32, {4});
  CHECK(cohort_broadcast(rt, "root_mismatch", &r.t, nullptr, g_rank == 0 ? 0 : 1) == COHORT_ERR_MISMATCH, "%s",
        cohort_last_error());
}

void test_every_op_and_dtype(cohort_runtime_t* rt) {
  const DLDataType types[] = {kF32, kF16, kBF16, kF64, kI32, kI64, kU8};
  const cohort_reduce_op_t ops[] = {COHORT_REDUCE_SUM, COHORT_REDUCE_AVERAGE, COHORT_REDUCE_MIN, COHORT_REDUCE_MAX,
                                    COHORT_REDUCE_PRODUCT};
  int ti = 0;
  for (DLDataType t : types) {
    bool nn = t.code == kDLUInt;
    bool integer = t.code == kDLInt || t.code == kDLUInt;
    for (cohort_reduce_op_t op : ops) {
      Buffer in(t, {3, 5}), out(t, {3, 5});
      for (int64_t k = 0; k < 15; ++k) put(in, k, value(g_rank, k, nn));
      cohort_allreduce_options_t opts;
      OK(cohort_allreduce_options_default(&opts));
      opts.op = op;
      std::string name = "ar." + std::to_string(ti) + "." + std::to_string(op);
      bool in_place = (ti + op) % 2 == 0;
      OK(cohort_allreduce(rt, name.c_str(), &in.t, in_place ? nullptr : &out.t, &opts));
      for (int64_t k = 0; k < 15; ++k) {
        double e = value(0, k, nn);
        for (int r = 1; r < g_size; ++r) {
          double v = value(r, k, nn);
          if (op == COHORT_REDUCE_SUM || op == COHORT_REDUCE_AVERAGE) e += v;
          if (op == COHORT_REDUCE_MIN) e = std::min(e, v);
          if (op == COHORT_REDUCE_MAX) e = std::max(e, v);
          if (op == COHORT_REDUCE_PRODUCT) e *= v;
        }
        if (op == COHORT_REDUCE_AVERAGE) e = integer ? std::trunc(e / g_size) : e / g_size;
        double tol = t.bits == 16 ? 0.02 * std::fabs(e) + 0.01 : 1e-6;
        double got = at(in_place ? in.t : out.t, k);
        CHECK(std::fabs(got - e) <= tol, "%s element %lld: %g != %g", name.c_str(), static_cast<long long>(k), got, e);
      }
    }
    // broadcast from every root
    for (int root = 0; root < g_size; ++root) {
      Buffer b(t, {6});
      for (int64_t k = 0; k < 6; ++k) put(b, k, value(g_rank, k, true));
      std::string name = "bc." + std::to_string(ti) + "." + std::to_string(root);
      OK(cohort_broadcast(rt, name.c_str(), &b.t, nullptr, root));
      for (int64_t k = 0; k < 6; ++k) CHECK(at(b.t, k) == value(root, k, true), "%s", name.c_str());
    }
    // allgather with a different first dimension per rank
    {
      Buffer b(t, {g_rank + 1, 2});
      for (int64_t k = 0; k < b.numel(); ++k) put(b, k, value(g_rank, k, true));
      DLManagedTensor* res = nullptr;
      std::string name = "ag." + std::to_string(ti);
      OK(cohort_allgather(rt, name.c_str(), &b.t, &res));
      if (res) {
        int64_t rows = 0;
        for (int r = 0; r < g_size; ++r) rows += r + 1;
        CHECK(res->dl_tensor.ndim == 2 && res->dl_tensor.shape[0] == rows && res->dl_tensor.shape[1] == 2, "%s shape",
              name.c_str());
        int64_t off = 0;
        for (int r = 0; r < g_size; ++r)
          for (int64_t k = 0; k < (r + 1) * 2; ++k, ++off)
            CHECK(at(res->dl_tensor, off) == value(r, k, true), "%s element %lld", name.c_str(),
                  static_cast<long long>(off));
        res->deleter(res);
      }
    }
    // reducescatter (sum)
    {
      Buffer b(t, {7, 2});
      for (int64_t k = 0; k < 14; ++k) put(b, k, value(g_rank, k, true));
      DLManagedTensor* res = nullptr;
      std::string name = "rs." + std::to_string(ti);
      OK(cohort_reducescatter(rt, name.c_str(), &b.t, COHORT_REDUCE_SUM, &res));
      if (res) {
        int64_t first = 0;
        for (int r = 0; r < g_rank; ++r) first += 7 / g_size + (r < 7 % g_size ? 1 : 0);
        int64_t rows = 7 / g_size + (g_rank < 7 % g_size ? 1 : 0);
        CHECK(res->dl_tensor.shape[0] == rows, "%s rows", name.c_str());
        for (int64_t k = 0; k < rows * 2; ++k) {
          double e = 0;
          for (int r = 0; r < g_size; ++r) e += value(r, first * 2 + k, true);
          if (t.code == kDLUInt) e = static_cast<uint8_t>(e);
          CHECK(at(res->dl_tensor, k) == e, "%s element %lld", name.c_str(), static_cast<long long>(k));
        }
        res->deleter(res);
      }
    }
    ++ti;
  }
  // alltoall with split sizes: rank s sends (s + d) % 3 rows to rank d
  {
    std::vector<int64_t> splits;
    int64_t rows = 0;
    for (int d = 0; d < g_size; ++d) {
      splits.push_back((g_rank + d) % 3);
      rows += splits.back();
    }
    Buffer b(kI64, {rows, 2});
    for (int64_t k = 0; k < rows * 2; ++k) reinterpret_cast<int64_t*>(b.bytes.data())[k] = g_rank * 1000 + k;
    DLManagedTensor* res = nullptr;
    std::vector<int64_t> recv(static_cast<size_t>(g_size));
    OK(cohort_alltoallv(rt, "a2a", &b.t, splits.data(), splits.size(), &res, recv.data(), recv.size()));
    if (res) {
      int64_t off = 0;
      for (int s = 0; s < g_size; ++s) {
        CHECK(recv[static_cast<size_t>(s)] == (s + g_rank) % 3, "recv split from %d", s);
        int64_t first = 0;
        for (int d = 0; d < g_rank; ++d) first += (s + d) % 3;
        for (int64_t k = 0; k < (s + g_rank) % 3 * 2; ++k, ++off)
          CHECK(static_cast<const int64_t*>(res->dl_tensor.data)[off] == s * 1000 + first * 2 + k, "a2a element");
      }
      res->deleter(res);
    }
  }
  OK(cohort_barrier(rt));
}

void test_join(cohort_runtime_t* rt) {
  int steps = g_rank == 1 ? 2 : 4;
  for (int step = 0; step < steps; ++step) {
    Buffer b(kF32, {5});
    for (int64_t k = 0; k < 5; ++k) put(b, k, g_rank + 1);
    OK(cohort_allreduce(rt, "join.grad", &b.t, nullptr, nullptr));
    double expect = 0;
    for (int r = 0; r < g_size; ++r)
      if (step < 2 || r != 1) expect += r + 1;
    CHECK(at(b.t, 0) == expect, "join step %d: %g != %g", step, at(b.t, 0), expect);
  }
  int last = -1;
  OK(cohort_join(rt, &last));
  CHECK(last >= 0 && last != 1, "last joined %d", last);
}

// One step of every collective; active(r) says whether rank r still submits (the
// others have joined). References are computed here from value().
template <typename Active>
void every_op_step(cohort_runtime_t* rt, Active active, int step) {
  // allreduce: joined ranks add zeros.
  Buffer ar(kF32, {5});
  for (int64_t k = 0; k < 5; ++k) put(ar, k, value(g_rank, k, false));
  OK(cohort_allreduce(rt, "jo.allreduce", &ar.t, nullptr, nullptr));
  for (int64_t k = 0; k < 5; ++k) {
    double e = 0;
    for (int r = 0; r < g_size; ++r)
      if (active(r)) e += value(r, k, false);
    CHECK(at(ar.t, k) == e, "join step %d allreduce element %lld: %g != %g", step, static_cast<long long>(k),
          at(ar.t, k), e);
  }
  // allgather: rank r gives r + 1 rows of 2; joined ranks none.
  {
    Buffer b(kF64, {g_rank + 1, 2});
    for (int64_t k = 0; k < b.numel(); ++k) put(b, k, value(g_rank, k, true));
    DLManagedTensor* res = nullptr;
    OK(cohort_allgather(rt, "jo.allgather", &b.t, &res));
    if (res) {
      int64_t rows = 0;
      for (int r = 0; r < g_size; ++r) rows += active(r) ? r + 1 : 0;
      CHECK(res->dl_tensor.shape[0] == rows, "join step %d allgather rows %lld != %lld", step,
            static_cast<long long>(res->dl_tensor.shape[0]), static_cast<long long>(rows));
      int64_t off = 0;
      for (int r = 0; r < g_size && res->dl_tensor.shape[0] == rows; ++r)
        for (int64_t k = 0; active(r) && k < (r + 1) * 2; ++k, ++off)
          CHECK(at(res->dl_tensor, off) == value(r, k, true), "join step %d allgather element %lld", step,
                static_cast<long long>(off));
      res->deleter(res);
    }
  }
  // broadcast from rank 0, which joins last.
  {
    Buffer b(kI32, {4});
    for (int64_t k = 0; k < 4; ++k) put(b, k, value(g_rank, k, false));
    OK(cohort_broadcast(rt, "jo.broadcast", &b.t, nullptr, 0));
    for (int64_t k = 0; k < 4; ++k) CHECK(at(b.t, k) == value(0, k, false), "join step %d broadcast", step);
  }
  // reducescatter (sum) of 7 rows: joined ranks add zeros.
  {
    Buffer b(kF32, {7, 2});
    for (int64_t k = 0; k < 14; ++k) put(b, k, value(g_rank, k, false));
    DLManagedTensor* res = nullptr;
    OK(cohort_reducescatter(rt, "jo.reducescatter", &b.t, COHORT_REDUCE_SUM, &res));
    if (res) {
      int64_t first = 0;
      for (int r = 0; r < g_rank; ++r) first += 7 / g_size + (r < 7 % g_size ? 1 : 0);
      int64_t rows = 7 / g_size + (g_rank < 7 % g_size ? 1 : 0);
      CHECK(res->dl_tensor.shape[0] == rows, "join step %d reducescatter rows", step);
      for (int64_t k = 0; k < rows * 2 && res->dl_tensor.shape[0] == rows; ++k) {
        double e = 0;
        for (int r = 0; r < g_size; ++r)
          if (active(r)) e += value(r, first * 2 + k, false);
        CHECK(at(res->dl_tensor, k) == e, "join step %d reducescatter element %lld: %g != %g", step,
              static_cast<long long>(k), at(res->dl_tensor, k), e);
      }
      res->deleter(res);
    }
  }
  // alltoall: rank s sends d + 1 rows to rank d holding s * 100 + d * 10 + j; blocks
  // from and to joined ranks are empty.
  {
    std::vector<int64_t> splits;
    int64_t rows = 0;
    for (int d = 0; d < g_size; ++d) {
      splits.push_back(d + 1);
      rows += d + 1;
    }
    Buffer b(kI64, {rows, 1});
    int64_t row = 0;
    for (int d = 0; d < g_size; ++d)
      for (int j = 0; j <= d; ++j, ++row) reinterpret_cast<int64_t*>(b.bytes.data())[row] = g_rank * 100 + d * 10 + j;
    DLManagedTensor* res = nullptr;
    std::vector<int64_t> recv(static_cast<size_t>(g_size), -1);
    OK(cohort_alltoallv(rt, "jo.alltoall", &b.t, splits.data(), splits.size(), &res, recv.data(), recv.size()));
    if (res) {
      int64_t off = 0;
      for (int s = 0; s < g_size; ++s) {
        int64_t expect_rows = active(s) ? g_rank + 1 : 0;
        CHECK(recv[static_cast<size_t>(s)] == expect_rows, "join step %d alltoall rows from %d: %lld", step, s,
              static_cast<long long>(recv[static_cast<size_t>(s)]));
        for (int64_t j = 0; j < expect_rows; ++j, ++off)
          CHECK(static_cast<const int64_t*>(res->dl_tensor.data)[off] == s * 100 + g_rank * 10 + j,
                "join step %d alltoall element %lld", step, static_cast<long long>(off));
      }
      CHECK(res->dl_tensor.shape[0] == off, "join step %d alltoall rows", step);
      res->deleter(res);
    }
  }
  // barrier: joined ranks count as arrived.
  OK(cohort_barrier(rt));
}

// Every collective while some ranks have joined: rank 1 stops after 1 step, rank 2
// (np 3) after 2, rank 0 after 3.
void test_join_every_op(cohort_runtime_t* rt) {
  auto steps_of = [](int r) { return r == 0 ? 3 : r; };
  for (int step = 0; step < steps_of(g_rank); ++step)
    every_op_step(
        rt, [&](int r) { return step < steps_of(r); }, step);
  int last = -1;
  OK(cohort_join(rt, &last));
  CHECK(last == 0, "last joined %d, expected 0", last);
  every_op_step(
      rt, [](int) { return true; }, 99);
  // A broadcast whose root has joined fails on every other rank, naming it.
  if (g_rank == g_size - 1) {
    OK(cohort_join(rt, &last));
  } else {
    Buffer b(kF32, {3});
    cohort_status_t s = cohort_broadcast(rt, "jo.from_joined", &b.t, nullptr, g_size - 1);
    CHECK(s == COHORT_ERR_MISMATCH, "broadcast from a joined root returned %d", static_cast<int>(s));
    std::string msg = cohort_last_error();
    CHECK(msg.find("'jo.from_joined'") != std::string::npos && msg.find("root rank") != std::string::npos,
          "message: %s", msg.c_str());
    OK(cohort_join(rt, &last));
  }
  CHECK(last >= 0 && last < g_size - 1, "last joined %d", last);
}

// A CUDA tensor on a runtime without a usable GPU (no GPU here, or a build without
// CUDA/NCCL) is refused at submission with an error naming the tensor and what works.
void test_device_tensor_without_gpu(cohort_runtime_t* rt) {
  char device[32] = {0};
  OK(cohort_runtime_device(rt, device, sizeof device, nullptr));
  if (std::string(device).rfind("cuda", 0) == 0) return;  // a GPU runtime: the gpu tests cover it
  Buffer b(kF32, {4});
  b.t.device = {kDLCUDA, 0};
  cohort_status_t s = cohort_allreduce(rt, "on.gpu", &b.t, nullptr, nullptr);
  CHECK(s == COHORT_ERR_UNSUPPORTED, "device tensor without a GPU returned %d", static_cast<int>(s));
  std::string msg = cohort_last_error();
  CHECK(msg.find("'on.gpu': the tensor is in CUDA memory (cuda:0)") != std::string::npos, "message: %s", msg.c_str());
  CHECK(msg.find("host memory") != std::string::npos, "message: %s", msg.c_str());
  CHECK(msg.find("no GPU is usable") != std::string::npos || msg.find("built without CUDA") != std::string::npos ||
            msg.find("device=cpu") != std::string::npos,
        "message: %s", msg.c_str());
  OK(cohort_barrier(rt));  // the engine goes on
}

void test_stall_shutdown() {
  cohort_runtime_t* rt = make_runtime({{"stall_shutdown_s", "0.5"}, {"stall_warning_s", "0.2"}});
  if (g_rank == 0) {
    Buffer b(kF32, {3});
    cohort_status_t s = cohort_allreduce(rt, "withheld", &b.t, nullptr, nullptr);
    CHECK(s == COHORT_ERR_STALLED, "status %d", s);
    std::string msg = cohort_last_error();
    CHECK(msg.find("'withheld'") != std::string::npos && msg.find("never submitted it") != std::string::npos, "%s",
          msg.c_str());
  }
  // The other ranks wait outside the engine (a plain MPI barrier), so only "withheld" stalls.
  OK(cohort_runtime_barrier(rt));
  cohort_runtime_destroy(rt);
}

void test_timeline(const std::string& path) {
  cohort_runtime_t* rt = make_runtime({{"timeline_file", path.c_str()}});
  for (int step = 0; step < 3; ++step) {
    Buffer b(kF32, {16});
    OK(cohort_allreduce(rt, "tl.grad", &b.t, nullptr, nullptr));
    OK(cohort_runtime_mark_step(rt));
  }
  cohort_runtime_destroy(rt);
  if (g_rank != 0) return;
  std::string cmd =
      "/usr/bin/python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); ev=d['traceEvents']; "
      "pids={e['pid'] for e in ev}; assert pids==set(range(" +
      std::to_string(g_size) +
      ")), pids; assert any(e['ph']=='i' for e in ev); "
      "assert any(e.get('name')=='ALLREDUCE' for e in ev)\" " +
      path;
  if (std::system("test -x /usr/bin/python3") == 0) CHECK(std::system(cmd.c_str()) == 0, "timeline %s", path.c_str());
  std::remove(path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // Every rank is on this machine: allreduces go through the shared segment, in 1 KiB
  // pieces so that big tensors run through many of them.
  cohort_runtime_t* rt = make_runtime({{"fusion_threshold_mb", "1"}, {"allreduce_shm_kb", "1"}});
  if (!rt) return 1;
  OK(cohort_runtime_rank(rt, &g_rank));
  rank_check_rank = g_rank;
  OK(cohort_runtime_size(rt, &g_size));
  test_random_order_fusion_and_big(rt);
  test_repeated_names(rt);
  test_mismatch(rt);
  test_every_op_and_dtype(rt);
  test_join(rt);
  test_join_every_op(rt);
  test_device_tensor_without_gpu(rt);
  cohort_runtime_destroy(rt);
  // The same reductions over MPI_Allreduce, in small pieces with a narrow window so big
  // tensors slide through several windows.
  rt = make_runtime({{"fusion_threshold_mb", "1"},
                     {"allreduce_shm_kb", "0"},
                     {"allreduce_chunk_kb", "256"},
                     {"allreduce_window", "2"}});
  if (!rt) return 1;
  test_random_order_fusion_and_big(rt);
  test_every_op_and_dtype(rt);
  cohort_runtime_destroy(rt);
  test_stall_shutdown();
  test_timeline(std::string(argc > 1 ? argv[1] : "/tmp") + "/cohort_comm_timeline_" + std::to_string(g_size) + ".json");
  if (rank_check_failures) std::fprintf(stderr, "rank %d: %d checks failed\n", g_rank, rank_check_failures);
  return rank_check_failures ? 1 : 0;
}
