// The layer builder's parameter text (graph/layer_params.h): parsing, the kind table's
// keys and defaults, and errors that name the layer and leave the graph unchanged.
#include "graph/layer_params.h"

#include <gtest/gtest.h>

#include <string>

#include "core/status.h"

namespace {

using cohort::add_layer;
using cohort::Error;
using cohort::Graph;
using cohort::LayerParams;
using cohort::backend::ActKind;
using cohort::backend::LayerKind;
using cohort::backend::LayerSpec;

// The message of the kInvalidArgument error fn throws ("" when it throws none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cohort::Code::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

const LayerSpec& layer(const Graph& g, int index) { return g.spec().layers.at(static_cast<size_t>(index)); }

TEST(LayerParams, ItemsAreSeparatedBySpacesCommasTabsAndNewlinesAndTheLastOneWins) {
  const LayerParams p("out=8,kernel=5\tstride=2\npad=1  kernel=3", "c");
  EXPECT_EQ(p.integer("out", 0), 8);
  EXPECT_EQ(p.integer("kernel", 0), 3);
  EXPECT_EQ(p.integer("stride", 0), 2);
  EXPECT_EQ(p.integer("pad", 0), 1);
  EXPECT_EQ(p.integer("dilation", 7), 7);  // absent: the fallback
  EXPECT_DOUBLE_EQ(LayerParams("alpha=0.25", "a").number("alpha", 0), 0.25);
  EXPECT_DOUBLE_EQ(LayerParams("", "a").number("alpha", 0.5), 0.5);
}

TEST(LayerParams, BadTextIsAnErrorNamingTheLayerAndTheItem) {
  EXPECT_NE(error_of([] { LayerParams("out", "c1"); }).find("layer 'c1': parameter 'out' is not key=value"),
            std::string::npos);
  EXPECT_NE(error_of([] { LayerParams("=3", "c1"); }).find("'=3' is not key=value"), std::string::npos);
  EXPECT_NE(error_of([] { LayerParams("out=eight", "c1").integer("out", 0); }).find("out='eight' is not a number"),
            std::string::npos);
  EXPECT_NE(error_of([] { LayerParams("out=", "c1").integer("out", 0); }).find("is not a number"), std::string::npos);
  EXPECT_NE(error_of([] { LayerParams("kernel=2.5", "c1").integer("kernel", 0); }).find("must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { LayerParams("kernel=3", "c1").required("out"); }).find("parameter 'out' is required"),
            std::string::npos);
}

TEST(LayerParams, KeysAreCheckedAgainstTheKind) {
  EXPECT_EQ(error_of([] { LayerParams("out=8 kernel=3", "c").check_keys("conv"); }), "");
  const std::string unknown = error_of([] { LayerParams("out=8 kernal=3", "c").check_keys("conv"); });
  EXPECT_NE(unknown.find("layer 'c': unknown parameter 'kernal' for conv; allowed: out, kernel, kh, kw"),
            std::string::npos)
      << unknown;
  EXPECT_NE(error_of([] { LayerParams("alpha=1", "r").check_keys("relu"); }).find("for relu (it takes none)"),
            std::string::npos);
  const std::string kind = error_of([] { LayerParams("", "s").check_keys("swish"); });
  EXPECT_NE(kind.find("unknown layer kind 'swish'; valid kinds: add, avg_pool, batch_norm, concat, conv"),
            std::string::npos)
      << kind;
}

TEST(AddLayer, DefaultsFillWhatTheTextLeavesOut) {
  Graph g({3, 16, 16});
  const int c = add_layer(g, "conv", "c", {}, "out=4");
  EXPECT_EQ(layer(g, c).kind, LayerKind::kConv);
  EXPECT_EQ(layer(g, c).inputs, std::vector<int>{0});  // no inputs: the last layer
  EXPECT_EQ(layer(g, c).out_channels, 4);
  EXPECT_EQ(layer(g, c).win.kh, 3);
  EXPECT_EQ(layer(g, c).win.kw, 3);
  EXPECT_EQ(layer(g, c).win.sh, 1);
  EXPECT_EQ(layer(g, c).win.ph, 0);
  EXPECT_TRUE(layer(g, c).bias);
  const int k = add_layer(g, "conv", "k", {}, "out=2 kernel=5 kw=1 bias=0 pad=2");
  EXPECT_EQ(layer(g, k).win.kh, 5);
  EXPECT_EQ(layer(g, k).win.kw, 1);
  EXPECT_FALSE(layer(g, k).bias);
  const int bn = add_layer(g, "batch_norm", "bn", {}, "");
  EXPECT_FLOAT_EQ(layer(g, bn).eps, 1e-5f);
  EXPECT_FLOAT_EQ(layer(g, bn).momentum, 0.1f);
  const int pool = add_layer(g, "max_pool", "pool", {}, "kernel=3");
  EXPECT_EQ(layer(g, pool).win.sh, 3);  // the stride defaults to the kernel
  const int lrn = add_layer(g, "lrn", "lrn", {}, "");
  EXPECT_EQ(layer(g, lrn).lrn_size, 5);
  EXPECT_FLOAT_EQ(layer(g, lrn).lrn_beta, 0.75f);
  const int leaky = add_layer(g, "leaky_relu", "leaky", {}, "");
  EXPECT_EQ(layer(g, leaky).act, ActKind::kLeakyRelu);
  EXPECT_FLOAT_EQ(layer(g, leaky).alpha, 0.01f);
  const int drop = add_layer(g, "dropout", "drop", {}, "");
  EXPECT_FLOAT_EQ(layer(g, drop).p, 0.5f);
  const int sum = add_layer(g, "add", "sum", {leaky, drop}, "");
  EXPECT_EQ(layer(g, sum).inputs, (std::vector<int>{leaky, drop}));
  add_layer(g, "flatten", "flat", {}, "");
  add_layer(g, "dense", "fc", {}, "out=10");
  const int loss = add_layer(g, "softmax_xent", "loss", {}, "smoothing=0.1");
  EXPECT_FLOAT_EQ(layer(g, loss).label_smoothing, 0.1f);
}

TEST(AddLayer, ABadLayerLeavesTheGraphAsItWas) {
  Graph g({3, 8, 8});
  add_layer(g, "conv", "c", {}, "out=4 pad=1");
  const int before = g.num_layers();
  EXPECT_NE(error_of([&] { add_layer(g, "conv", "d", {}, "out=4 kernal=3"); }).find("kernal"), std::string::npos);
  EXPECT_NE(error_of([&] { add_layer(g, "dense", "d", {}, ""); }).find("parameter 'out' is required"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              add_layer(g, "relu", "r", {0, 1}, "");
            }).find("layer 'r': relu takes one input, got 2"),
            std::string::npos);
  EXPECT_EQ(g.num_layers(), before);
}

TEST(AddLayer, EveryKindOfTheTableBuilds) {
  for (const std::string& kind : cohort::layer_kinds()) {
    Graph g({4, 8, 8});
    const std::string params = kind == "conv" || kind == "dense" || kind == "shortcut_a" ? "out=8" : "";
    std::vector<int> in;
    if (kind == "add" || kind == "concat") in = {0, 0};
    if (kind == "softmax_xent" || kind == "dense") add_layer(g, "flatten", "flat", {}, "");
    EXPECT_GT(add_layer(g, kind, "x", in, params), 0) << kind;
  }
}

}  // namespace
