// Max pooling on the CPU, in place of oneDNN 2.6's, which ran at a third of memory
// speed (a 2×2 window over 512×64×24×24 f32 values: 28 ms forward on one Emerald Rapids
// core, where reading them takes 8). The windows are those of kernels/pool.h — clipped
// to the input, so ceil mode's larger bottom and right padding holds no taps — and so
// are the maxima: each output is its window's first maximum in row-major order, and the
// gradient goes to that tap alone. The loops take 16 channels at a time (the input in
// oneDNN's nChw16c layout or NHWC, the output in the same layout or NCHW), so that they
// vectorise across channels.
#pragma once

#include <cstdint>

namespace cohort::backend::cpu {

// Where element (n, c, h, w) of a 4-D value lies: channels in blocks of `block` (1 for
// NCHW, 8 or 16 for oneDNN's blocked layouts, all of them for NHWC), the channels of a
// block contiguous; the other strides are in elements. A blocked layout's channels are
// padded to whole blocks, and the padding holds zeros.
struct PoolLayout {
  int64_t block = 1;
  int64_t image = 0, chunk = 0, row = 0, col = 0;
  int64_t at(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return n * image + (c / block) * chunk + h * row + w * col + c % block;
  }
};

// The layouts of a [n, c, h, w] value that max pooling reads and writes.
PoolLayout nchw_layout(int64_t n, int64_t c, int64_t h, int64_t w);
PoolLayout nhwc_layout(int64_t n, int64_t c, int64_t h, int64_t w);
PoolLayout blocked_layout(int64_t n, int64_t c, int64_t h, int64_t w, int64_t block);

struct MaxPoolGeometry {
  int64_t n = 0, c = 0, ih = 0, iw = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
};

// The passes work on planes: the pixels of one image and one block of the input's
// channels. max_pool_planes says how many there are; a caller splits [0, planes)
// across threads. `arg` holds, for each output value, its maximum's tap in the window
// (row-major from the unclipped window's top left; windows have at most 255 taps),
// max_pool_arg_size bytes of it.
int64_t max_pool_planes(const MaxPoolGeometry& g, const PoolLayout& x);
int64_t max_pool_arg_size(const MaxPoolGeometry& g, const PoolLayout& x);
// Whether max_pool_* take this window (at most 255 taps) over input x: on a CPU with
// AVX-512, whose registers hold 16 channels, where x's blocks are whole sixteens
// (nChw16c, or NHWC with a multiple of 16 channels); elsewhere oneDNN's pooling runs.
bool max_pool_supported(const MaxPoolGeometry& g, const PoolLayout& x);

// Both passes need max_pool_supported(g, x), and neither throws (they run inside the
// plan's OpenMP team).
// y's layout is x's or NCHW; dy's that of y.
// Forward over planes [lo, hi): y from x, and arg when not null (training). bf16
// values are their uint16_t bits; x and y have the same type. relu: x is a relu's
// output, whose gradient backward then applies too: arg records no tap (255) where the
// maximum is not positive, so nothing flows back through a relu that output zero.
void max_pool_forward(const MaxPoolGeometry& g, bool bf16, const void* x, const PoolLayout& xl, void* y,
                      const PoolLayout& yl, uint8_t* arg, bool relu, int64_t lo, int64_t hi);
// Backward over planes [lo, hi): every element of dx (padding channels included) is
// written, each the sum in f32 of what the windows covering it send it.
void max_pool_backward(const MaxPoolGeometry& g, bool bf16, const void* dy, const PoolLayout& yl, const uint8_t* arg,
                       void* dx, const PoolLayout& xl, int64_t lo, int64_t hi);

}  // namespace cohort::backend::cpu
