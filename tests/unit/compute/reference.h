// Naive f64 reference implementations of the layers (direct loops, NCHW), written
// independently of the backend, plus a finite-difference checker for their backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace ref {

using Vec = std::vector<double>;

struct Geo {  // NCHW input geometry and a window
  int n, c, h, w;
  int k_h, k_w, s, p, d = 1;
  int oh() const { return (h + 2 * p - d * (k_h - 1) - 1) / s + 1; }
  int ow() const { return (w + 2 * p - d * (k_w - 1) - 1) / s + 1; }
};

inline size_t at4(int c_, int h_, int w_, int n, int c, int h, int w) {
  return ((static_cast<size_t>(n) * c_ + c) * h_ + h) * w_ + w;
}

// y[n,o,oh,ow] = b[o] + sum x[n, g*cg + c, ...] * w[o, c, kh, kw]
inline Vec conv_fwd(const Geo& g, int out, int groups, const Vec& x, const Vec& w, const Vec* b) {
  const int oh = g.oh(), ow = g.ow(), cg = g.c / groups, og = out / groups;
  Vec y(static_cast<size_t>(g.n) * out * oh * ow, 0.0);
  for (int n = 0; n < g.n; ++n)
    for (int o = 0; o < out; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double acc = b ? (*b)[static_cast<size_t>(o)] : 0.0;
          const int grp = o / og;
          for (int c = 0; c < cg; ++c)
            for (int a = 0; a < g.k_h; ++a)
              for (int e = 0; e < g.k_w; ++e) {
                const int hh = i * g.s - g.p + a * g.d, ww = j * g.s - g.p + e * g.d;
                if (hh < 0 || hh >= g.h || ww < 0 || ww >= g.w) continue;
                acc += x[at4(g.c, g.h, g.w, n, grp * cg + c, hh, ww)] *
                       w[((static_cast<size_t>(o) * cg + c) * g.k_h + a) * g.k_w + e];
              }
          y[at4(out, oh, ow, n, o, i, j)] = acc;
        }
  return y;
}

inline void conv_bwd(const Geo& g, int out, int groups, const Vec& x, const Vec& w, const Vec& dy, Vec& dx, Vec& dw,
                     Vec& db) {
  const int oh = g.oh(), ow = g.ow(), cg = g.c / groups, og = out / groups;
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(static_cast<size_t>(out), 0.0);
  for (int n = 0; n < g.n; ++n)
    for (int o = 0; o < out; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          const double d = dy[at4(out, oh, ow, n, o, i, j)];
          db[static_cast<size_t>(o)] += d;
          const int grp = o / og;
          for (int c = 0; c < cg; ++c)
            for (int a = 0; a < g.k_h; ++a)
              for (int e = 0; e < g.k_w; ++e) {
                const int hh = i * g.s - g.p + a * g.d, ww = j * g.s - g.p + e * g.d;
                if (hh < 0 || hh >= g.h || ww < 0 || ww >= g.w) continue;
                const size_t xi = at4(g.c, g.h, g.w, n, grp * cg + c, hh, ww);
                const size_t wi = ((static_cast<size_t>(o) * cg + c) * g.k_h + a) * g.k_w + e;
                dx[xi] += d * w[wi];
                dw[wi] += d * x[xi];
              }
        }
}

// Pooling with the output size given (ceil or floor decided by the caller); average
// excludes padding.
inline Vec pool_fwd(const Geo& g, int oh, int ow, bool max, const Vec& x) {
  Vec y(static_cast<size_t>(g.n) * g.c * oh * ow);
  for (int n = 0; n < g.n; ++n)
    for (int c = 0; c < g.c; ++c)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double acc = max ? -1e300 : 0.0;
          int cnt = 0;
          for (int a = 0; a < g.k_h; ++a)
            for (int e = 0; e < g.k_w; ++e) {
              const int hh = i * g.s - g.p + a, ww = j * g.s - g.p + e;
              if (hh < 0 || hh >= g.h || ww < 0 || ww >= g.w) continue;
              const double v = x[at4(g.c, g.h, g.w, n, c, hh, ww)];
              acc = max ? std::max(acc, v) : acc + v;
              ++cnt;
            }
          y[at4(g.c, oh, ow, n, c, i, j)] = max ? acc : acc / cnt;
        }
  return y;
}

inline Vec pool_bwd(const Geo& g, int oh, int ow, bool max, const Vec& x, const Vec& dy) {
  Vec dx(x.size(), 0.0);
  for (int n = 0; n < g.n; ++n)
    for (int c = 0; c < g.c; ++c)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          const double d = dy[at4(g.c, oh, ow, n, c, i, j)];
          size_t best = 0;
          double bv = -1e300;
          std::vector<size_t> idx;
          for (int a = 0; a < g.k_h; ++a)
            for (int e = 0; e < g.k_w; ++e) {
              const int hh = i * g.s - g.p + a, ww = j * g.s - g.p + e;
              if (hh < 0 || hh >= g.h || ww < 0 || ww >= g.w) continue;
              const size_t xi = at4(g.c, g.h, g.w, n, c, hh, ww);
              idx.push_back(xi);
              if (x[xi] > bv) bv = x[xi], best = xi;
            }
          if (max)
            dx[best] += d;
          else
            for (size_t xi : idx) dx[xi] += d / static_cast<double>(idx.size());
        }
  return dx;
}

// Batch norm over (N, H, W) per channel, batch statistics (biased variance).
inline Vec bn_fwd(const Geo& g, const Vec& x, const Vec& scale, const Vec& shift, double eps) {
  Vec y(x.size());
  const double m = static_cast<double>(g.n) * g.h * g.w;
  for (int c = 0; c < g.c; ++c) {
    double mean = 0, var = 0;
    for (int n = 0; n < g.n; ++n)
      for (int i = 0; i < g.h * g.w; ++i) mean += x[at4(g.c, g.h, g.w, n, c, 0, 0) + static_cast<size_t>(i)];
    mean /= m;
    for (int n = 0; n < g.n; ++n)
      for (int i = 0; i < g.h * g.w; ++i) {
        const double t = x[at4(g.c, g.h, g.w, n, c, 0, 0) + static_cast<size_t>(i)] - mean;
        var += t * t;
      }
    var /= m;
    for (int n = 0; n < g.n; ++n)
      for (int i = 0; i < g.h * g.w; ++i) {
        const size_t k = at4(g.c, g.h, g.w, n, c, 0, 0) + static_cast<size_t>(i);
        y[k] = scale[static_cast<size_t>(c)] * (x[k] - mean) / std::sqrt(var + eps) + shift[static_cast<size_t>(c)];
      }
  }
  return y;
}

inline void bn_bwd(const Geo& g, const Vec& x, const Vec& scale, double eps, const Vec& dy, Vec& dx, Vec& dscale,
                   Vec& dshift) {
  dx.assign(x.size(), 0.0);
  dscale.assign(static_cast<size_t>(g.c), 0.0);
  dshift.assign(static_cast<size_t>(g.c), 0.0);
  const double m = static_cast<double>(g.n) * g.h * g.w;
  for (int c = 0; c < g.c; ++c) {
    std::vector<size_t> ks;
    for (int n = 0; n < g.n; ++n)
      for (int i = 0; i < g.h * g.w; ++i) ks.push_back(at4(g.c, g.h, g.w, n, c, 0, 0) + static_cast<size_t>(i));
    double mean = 0, var = 0;
    for (size_t k : ks) mean += x[k];
    mean /= m;
    for (size_t k : ks) var += (x[k] - mean) * (x[k] - mean);
    var /= m;
    const double inv = 1.0 / std::sqrt(var + eps);
    double sd = 0, sdx = 0;
    for (size_t k : ks) {
      sd += dy[k];
      sdx += dy[k] * (x[k] - mean) * inv;
    }
    dscale[static_cast<size_t>(c)] = sdx;
    dshift[static_cast<size_t>(c)] = sd;
    for (size_t k : ks) {
      const double xh = (x[k] - mean) * inv;
      dx[k] = scale[static_cast<size_t>(c)] * inv / m * (m * dy[k] - sd - xh * sdx);
    }
  }
}

// LRN across channels: y = x / (k + alpha/size * sum_{window} x^2)^beta.
inline Vec lrn_fwd(const Geo& g, int size, double alpha, double beta, double k, const Vec& x) {
  Vec y(x.size());
  for (int n = 0; n < g.n; ++n)
    for (int c = 0; c < g.c; ++c)
      for (int i = 0; i < g.h * g.w; ++i) {
        double s = 0;
        for (int cc = std::max(0, c - size / 2); cc <= std::min(g.c - 1, c + size / 2); ++cc) {
          const double v = x[at4(g.c, g.h, g.w, n, cc, 0, 0) + static_cast<size_t>(i)];
          s += v * v;
        }
        const size_t kk = at4(g.c, g.h, g.w, n, c, 0, 0) + static_cast<size_t>(i);
        y[kk] = x[kk] / std::pow(k + alpha / size * s, beta);
      }
  return y;
}

inline Vec dense_fwd(int n, int in, int out, const Vec& x, const Vec& w, const Vec& b) {
  Vec y(static_cast<size_t>(n) * out);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) {
      double acc = b[static_cast<size_t>(o)];
      for (int j = 0; j < in; ++j) acc += x[static_cast<size_t>(i) * in + j] * w[static_cast<size_t>(o) * in + j];
      y[static_cast<size_t>(i) * out + o] = acc;
    }
  return y;
}

inline void dense_bwd(int n, int in, int out, const Vec& x, const Vec& w, const Vec& dy, Vec& dx, Vec& dw, Vec& db) {
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(static_cast<size_t>(out), 0.0);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) {
      const double d = dy[static_cast<size_t>(i) * out + o];
      db[static_cast<size_t>(o)] += d;
      for (int j = 0; j < in; ++j) {
        dx[static_cast<size_t>(i) * in + j] += d * w[static_cast<size_t>(o) * in + j];
        dw[static_cast<size_t>(o) * in + j] += d * x[static_cast<size_t>(i) * in + j];
      }
    }
}

enum class Act { kRelu, kLeaky, kElu, kTanh, kSigmoid };

inline double act_f(Act a, double x, double alpha) {
  switch (a) {
    case Act::kRelu:
      return x > 0 ? x : 0;
    case Act::kLeaky:
      return x > 0 ? x : alpha * x;
    case Act::kElu:
      return x > 0 ? x : alpha * (std::exp(x) - 1);
    case Act::kTanh:
      return std::tanh(x);
    case Act::kSigmoid:
      return 1 / (1 + std::exp(-x));
  }
  return 0;
}

inline double act_df(Act a, double x, double alpha) {
  switch (a) {
    case Act::kRelu:
      return x > 0 ? 1 : 0;
    case Act::kLeaky:
      return x > 0 ? 1 : alpha;
    case Act::kElu:
      return x > 0 ? 1 : alpha * std::exp(x);
    case Act::kTanh:
      return 1 - std::tanh(x) * std::tanh(x);
    case Act::kSigmoid: {
      const double s = 1 / (1 + std::exp(-x));
      return s * (1 - s);
    }
  }
  return 0;
}

// Mean softmax cross-entropy with label smoothing; grad = d(loss)/d(logits).
inline double xent(int n, int k, const Vec& logits, const std::vector<int32_t>& labels, double eps, Vec* grad) {
  double total = 0;
  if (grad) grad->assign(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    const double* z = &logits[static_cast<size_t>(i) * k];
    double mx = *std::max_element(z, z + k), s = 0;
    for (int j = 0; j < k; ++j) s += std::exp(z[j] - mx);
    for (int j = 0; j < k; ++j) {
      const double lp = z[j] - mx - std::log(s);
      const double t = (j == labels[static_cast<size_t>(i)] ? 1 - eps : 0) + eps / k;
      total -= t * lp;
      if (grad) (*grad)[static_cast<size_t>(i) * k + j] = (std::exp(lp) - t) / n;
    }
  }
  return total / n;
}

// d/dx of sum(f(x) * dy) by central differences.
inline Vec numeric_grad(const std::function<Vec(const Vec&)>& f, Vec x, const Vec& dy, double h = 1e-6) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    Vec a = f(x);
    x[i] = keep - h;
    Vec b = f(x);
    x[i] = keep;
    double s = 0;
    for (size_t j = 0; j < a.size(); ++j) s += (a[j] - b[j]) * dy[j];
    g[i] = s / (2 * h);
  }
  return g;
}

// max |a - b| / max(max |b|, floor): the test's relative error (infinite where a or b
// is not finite).
template <typename A, typename B>
double rel_err(const A& a, const B& b, double floor = 1e-6) {
  double num = 0, den = floor;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();  // std::max would skip a NaN
    num = std::max(num, d);
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return num / den;
}

inline Vec random_vec(size_t n, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(static_cast<float>(lo), static_cast<float>(hi));
  Vec v(n);
  for (auto& e : v) e = dist(gen);  // values exactly representable in f32
  return v;
}

}  // namespace ref
