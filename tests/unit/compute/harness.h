// Runs a Graph through the CPU backend with given inputs, parameters and output
// gradient, and returns everything in NCHW as doubles, for comparison with ref::.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "graph/graph.h"
#include "support/host_views.h"
#include "reference.h"

namespace testing_compute {

using cohort::Graph;
using cohort::Layout;

struct Result {
  ref::Vec y, dx;
  std::vector<ref::Vec> dparams;
};

// NCHW <-> NHWC for a batch of {C, H, W} samples (identity for flat samples).
inline ref::Vec to_layout(const ref::Vec& v, const cohort::Shape& s, int64_t n, Layout layout, bool from_nchw) {
  if (s.size() != 3 || layout == Layout::kNCHW) return v;
  const int64_t c = s[0], hw = s[1] * s[2];
  ref::Vec out(v.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < hw; ++i) {
        const size_t nchw = static_cast<size_t>((b * c + ch) * hw + i),
                     nhwc = static_cast<size_t>((b * hw + i) * c + ch);
        if (from_nchw)
          out[nhwc] = v[nchw];
        else
          out[nchw] = v[nhwc];
      }
  return out;
}

inline std::vector<float> to_f32(const ref::Vec& v) { return {v.begin(), v.end()}; }
inline ref::Vec to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline void set_params(Graph& g, const std::vector<ref::Vec>& params) {
  if (!g.materialized()) g.materialize(1);
  ASSERT_EQ(params.size(), g.params().size());
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_EQ(static_cast<int64_t>(params[i].size()), g.params()[i].value.numel()) << g.params()[i].name;
    float* p = g.params()[i].value.data_as<float>();
    for (size_t j = 0; j < params[i].size(); ++j) p[j] = static_cast<float>(params[i][j]);
  }
}

// Forward (training mode) + backward of the graph's last layer.
inline Result run(Graph& g, int64_t n, const ref::Vec& x, const std::vector<ref::Vec>& params, const ref::Vec& dy,
                  Layout layout = Layout::kNCHW) {
  set_params(g, params);
  const cohort::Shape& in_shape = g.shape(0);
  const cohort::Shape& out_shape = g.shape(g.num_layers() - 1);
  auto& plan = g.plan(n, layout, true, true);
  std::vector<float> xin = to_f32(to_layout(x, in_shape, n, layout, true));
  plan.forward(cohort::test::batch_view(xin, g, n, layout), {}, 0, {});
  std::vector<float> y(dy.size()), dx(x.size());
  plan.read(g.num_layers() - 1, cohort::test::batch_view(y, g, n, layout, g.num_layers() - 1));
  std::vector<float> dyl = to_f32(to_layout(dy, out_shape, n, layout, true));
  plan.backward(cohort::test::batch_view(dyl, g, n, layout, g.num_layers() - 1), [](int, const cohort::Event&) {}, {});
  plan.read_input_grad(cohort::test::batch_view(dx, g, n, layout));
  Result r;
  r.y = to_layout(to_f64(y), out_shape, n, layout, false);
  r.dx = to_layout(to_f64(dx), in_shape, n, layout, false);
  for (const auto& p : g.params()) {
    const float* d = p.grad.data_as<float>();
    r.dparams.emplace_back(d, d + p.grad.numel());
  }
  return r;
}

}  // namespace testing_compute
