// The channel sums of kernels/batch_norm.h on the GPU, and the launches of its functors
// for each storage type an NHWC value can have (f32, f16, bf16).
#include "kernels/batch_norm.h"
#include "kernels/cuda/launch.cuh"

namespace cohort::kernels::cuda {
namespace {

// A block covers 32 channels (a warp reads 32 neighbouring values of a row) and a run of
// rows, read by 8 row lanes; each thread sums at most kBnRowsPerThread rows in f32, and
// lane 0 adds the block's sums of its channel to the f64 totals.
constexpr int kLanes = 32, kRowLanes = 8;

// What a sums kernel does once its sums are made: nothing (this), or a finalize per channel.
struct NoThen {};

// Runs then(c) for every channel in the block that finishes last: each block's adds are
// made visible (a fence by every thread that added, then the block's barrier) before it
// takes its ticket, and the block with the last ticket reads the totals from L2
// (load_total) and sets the ticket counter back to zero for the next launch.
template <typename Then>
__device__ void then_in_last_block(const Then& then, int64_t channels, uint32_t* tickets) {
  if constexpr (!std::is_same_v<Then, NoThen>) {
    __shared__ bool last;
    const unsigned t = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
    __threadfence();
    __syncthreads();
    if (t == 0) {
      __threadfence();
      last = atomicAdd(tickets, 1u) == static_cast<uint64_t>(gridDim.x) * gridDim.y - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int64_t c = t; c < channels; c += threads) then(c);
    if (t == 0) *tickets = 0;
  }
}

// Adds map's kVec values of rows first, first + stride, … (< end) to a and b in row
// order, four rows' loads issued before their adds: the loop is bound by memory latency,
// and one the compiler unrolls by itself tests the end before each row's load, which
// leaves one load in flight per thread.
template <int kVec, typename Map>
__device__ void sum_rows(const Map& map, int64_t first, int64_t end, int64_t stride, int64_t c0, float* a, float* b) {
  constexpr int kAhead = 4;
  int64_t r = first;
  for (; r + (kAhead - 1) * stride < end; r += kAhead * stride) {
    float u[kAhead][kVec], v[kAhead][kVec];
#pragma unroll
    for (int k = 0; k < kAhead; ++k) map(r + k * stride, c0, u[k], v[k]);
#pragma unroll
    for (int k = 0; k < kAhead; ++k)
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        a[j] += u[k][j];
        b[j] += v[k][j];
      }
  }
  for (; r < end; r += stride) {
    float u[kVec], v[kVec];
    map(r, c0, u, v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      a[j] += u[j];
      b[j] += v[j];
    }
  }
}

template <typename Map, typename Then = NoThen>
__global__ void channel_sums_kernel(int64_t rows, int64_t channels, int64_t rows_per_block, Map map, double* sums,
                                    Then then = {}, uint32_t* tickets = nullptr) {
  __shared__ float pa[kRowLanes][kLanes + 1], pb[kRowLanes][kLanes + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kLanes + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  float a = 0.f, b = 0.f;
  if (c < channels) {
    const auto one = [&](int64_t r, int64_t ch, float* u, float* v) { map(r, ch, u[0], v[0]); };
    sum_rows<1>(one, r0 + threadIdx.y, r1, kRowLanes, c, &a, &b);
  }
  pa[threadIdx.y][threadIdx.x] = a;
  pb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    double ta = 0, tb = 0;
    for (int k = 0; k < kRowLanes; ++k) {
      ta += pa[k][threadIdx.x];
      tb += pb[k][threadIdx.x];
    }
    atomicAdd(sums + c, ta);
    atomicAdd(sums + channels + c, tb);
  }
  then_in_last_block(then, channels, tickets);
}

// The packed form (kernels/batch_norm.h's BnSumsLayout): each thread sums kVec channels
// of its rows in f32; then, per channel of the block, one thread adds up the row lanes'
// sums in f64 and adds them to the totals.
template <int kVec, typename Map, typename Then = NoThen>
__global__ void channel_sums_packed_kernel(int64_t rows, int64_t channels, BnSumsLayout l, Map map, double* sums,
                                           Then then = {}, uint32_t* tickets = nullptr) {
  __shared__ float pa[kLanes * kRowLanes][kVec], pb[kLanes * kRowLanes][kVec];
  const unsigned t = threadIdx.y * kLanes + threadIdx.x;
  const BnSumsShare s = bn_sums_share(l, rows, blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y);
  float a[kVec] = {}, b[kVec] = {};
  if (s.pack >= 0) sum_rows<kVec>(map, s.first, s.end, s.stride, s.pack * kVec, a, b);
  for (int j = 0; j < kVec; ++j) {
    pa[t][j] = a[j];
    pb[t][j] = b[j];
  }
  __syncthreads();
  // Thread t < q·kVec totals channel t of the block (pack t / kVec, value t % kVec),
  // whose sums sit with lanes t / kVec + m·q (m < 32 / q) of each of the 8 warps.
  if (t < static_cast<unsigned>(l.q * kVec)) {
    const int pq = static_cast<int>(t) / kVec, j = static_cast<int>(t) % kVec;
    const int64_t c = (static_cast<int64_t>(blockIdx.x) * l.q + pq) * kVec + j;
    if (c < channels) {
      double ta = 0, tb = 0;
      for (int y = 0; y < kRowLanes; ++y)
        for (int x = pq; x < kLanes; x += l.q) {
          ta += pa[y * kLanes + x][j];
          tb += pb[y * kLanes + x][j];
        }
      atomicAdd(sums + c, ta);
      atomicAdd(sums + channels + c, tb);
    }
  }
  then_in_last_block(then, channels, tickets);
}

// The grid of channel_sums_kernel: 32 channels a block across, runs of rows down.
struct SumsGrid {
  dim3 grid;
  int64_t rows_per_block;
};
SumsGrid sums_grid(int64_t rows, int64_t channels) {
  constexpr int64_t kMaxGridY = 65535;
  int64_t rows_per_block = kRowLanes * kBnRowsPerThread;
  const int64_t grid_y = (rows + rows_per_block - 1) / rows_per_block;
  if (grid_y > kMaxGridY) {  // more rows per thread than kBnRowsPerThread: still summed, in longer runs
    rows_per_block = ((rows + kMaxGridY - 1) / kMaxGridY + kRowLanes - 1) / kRowLanes * kRowLanes;
  }
  return {dim3(static_cast<unsigned>((channels + kLanes - 1) / kLanes),
               static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block)),
          rows_per_block};
}

// The blocks' tickets count in 32 bits: a grid of more than 2^32 blocks would have no
// last block (some 2 million channels).
void check_tickets(const dim3& grid, int64_t channels) {
  if (static_cast<uint64_t>(grid.x) * grid.y > (uint64_t{1} << 32))
    fail(Code::kUnsupported, "batch norm over ", channels, " channels: the statistics need ", grid.x, " x ", grid.y,
         " blocks, more than their 32-bit count of finished blocks holds");
}

}  // namespace

template <int kVec, typename Map>
void launch_channel_sums_packed(void* stream, int64_t rows, int64_t channels, const BnSumsLayout& l, Map map,
                                double* sums) {
  channel_sums_packed_kernel<kVec>
      <<<dim3(l.grid_x, l.grid_y), dim3(kLanes, kRowLanes), 0, static_cast<cudaStream_t>(stream)>>>(rows, channels, l,
                                                                                                    map, sums);
  check_launch("a packed batch-norm channel-sums kernel");
}

template <typename Map>
void launch_channel_sums(void* stream, int64_t rows, int64_t channels, Map map, double* sums) {
  const SumsGrid g = sums_grid(rows, channels);
  channel_sums_kernel<<<g.grid, dim3(kLanes, kRowLanes), 0, static_cast<cudaStream_t>(stream)>>>(
      rows, channels, g.rows_per_block, map, sums);
  check_launch("a batch-norm channel-sums kernel");
}

template <typename Map, typename Then>
void launch_channel_sums_then(void* stream, int64_t rows, int64_t channels, Map map, double* sums, Then then,
                              uint32_t* tickets) {
  const SumsGrid g = sums_grid(rows, channels);
  check_tickets(g.grid, channels);
  channel_sums_kernel<<<g.grid, dim3(kLanes, kRowLanes), 0, static_cast<cudaStream_t>(stream)>>>(
      rows, channels, g.rows_per_block, map, sums, then, tickets);
  check_launch("a batch-norm statistics kernel");
}

template <int kVec, typename Map, typename Then>
void launch_channel_sums_packed_then(void* stream, int64_t rows, int64_t channels, const BnSumsLayout& l, Map map,
                                     double* sums, Then then, uint32_t* tickets) {
  check_tickets(dim3(l.grid_x, l.grid_y), channels);
  channel_sums_packed_kernel<kVec>
      <<<dim3(l.grid_x, l.grid_y), dim3(kLanes, kRowLanes), 0, static_cast<cudaStream_t>(stream)>>>(
          rows, channels, l, map, sums, then, tickets);
  check_launch("a packed batch-norm statistics kernel");
}

#define COHORT_BN_KERNELS(S, C)                                                                                        \
  template void launch_channel_sums<BnStats<S, C>>(void*, int64_t, int64_t, BnStats<S, C>, double*);                   \
  template void launch_channel_sums<BnGradStats<S, C>>(void*, int64_t, int64_t, BnGradStats<S, C>, double*);           \
  template void launch_for_each<BnAffine<S, C>, S*, const S*, const float*, const S*>(                                 \
      void*, int64_t, BnAffine<S, C>, S*, const S*, const float*, const S*);                                           \
  template void launch_for_each<BnBackwardData<S, C>, S*, const S*, const S*, const float*, const S*, S*>(             \
      void*, int64_t, BnBackwardData<S, C>, S*, const S*, const S*, const float*, const S*, S*);                       \
  template void launch_channel_sums_packed<kPack<S>, BnStatsPacked<S, C>>(                                             \
      void*, int64_t, int64_t, const BnSumsLayout&, BnStatsPacked<S, C>, double*);                                     \
  template void launch_channel_sums_packed<kPack<S>, BnGradStatsPacked<S, C>>(                                         \
      void*, int64_t, int64_t, const BnSumsLayout&, BnGradStatsPacked<S, C>, double*);                                 \
  template void launch_for_each<BnAffinePacked<S, C>, S*, const S*, const float*, const S*>(                           \
      void*, int64_t, BnAffinePacked<S, C>, S*, const S*, const float*, const S*);                                     \
  template void launch_for_each<BnBackwardDataPacked<S, C>, S*, const S*, const S*, const float*, const S*, S*>(       \
      void*, int64_t, BnBackwardDataPacked<S, C>, S*, const S*, const S*, const float*, const S*, S*);                 \
  template void launch_channel_sums_then<BnStats<S, C>, BnForwardFinalize<S, C>>(                                      \
      void*, int64_t, int64_t, BnStats<S, C>, double*, BnForwardFinalize<S, C>, uint32_t*);                            \
  template void launch_channel_sums_then<BnGradStats<S, C>, BnBackwardFinalize>(                                       \
      void*, int64_t, int64_t, BnGradStats<S, C>, double*, BnBackwardFinalize, uint32_t*);                             \
  template void launch_channel_sums_packed_then<kPack<S>, BnStatsPacked<S, C>, BnForwardFinalize<S, C>>(               \
      void*, int64_t, int64_t, const BnSumsLayout&, BnStatsPacked<S, C>, double*, BnForwardFinalize<S, C>, uint32_t*); \
  template void launch_channel_sums_packed_then<kPack<S>, BnGradStatsPacked<S, C>, BnBackwardFinalize>(                \
      void*, int64_t, int64_t, const BnSumsLayout&, BnGradStatsPacked<S, C>, double*, BnBackwardFinalize, uint32_t*);

COHORT_BN_KERNELS(float, F32)
COHORT_BN_KERNELS(uint16_t, F16Codec)
COHORT_BN_KERNELS(uint16_t, BF16Codec)

template void launch_for_each<BnInferenceFinalize>(void*, int64_t, BnInferenceFinalize);

}  // namespace cohort::kernels::cuda
