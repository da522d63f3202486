#include "graph/layer_params.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "core/status.h"

namespace cohort {
namespace {

// What one kind takes and builds. `in` holds the inputs (at least one); builders that
// take one input call one() for it.
struct Kind {
  std::vector<std::string> keys;
  std::function<int(Graph& g, const std::string& name, const std::vector<int>& in, const LayerParams& p)> build;
};

int one(const std::string& kind, const std::string& name, const std::vector<int>& in) {
  require(in.size() == 1, "layer '", name, "': ", kind, " takes one input, got ", in.size());
  return in[0];
}

// A kind of one input whose builder `fn(g, input, name, params)` reads `keys`.
template <typename Fn>
std::pair<const std::string, Kind> single(const char* kind, std::vector<std::string> keys, Fn fn) {
  return {kind,
          Kind{std::move(keys), [kind, fn](Graph& g, const std::string& name, const std::vector<int>& in,
                                           const LayerParams& p) { return fn(g, one(kind, name, in), name, p); }}};
}

int conv(Graph& g, int in, const std::string& name, const LayerParams& p) {
  const int k = p.integer("kernel", 3);
  ConvOptions o{p.integer("kh", k),       p.integer("kw", k),     p.integer("stride", 1),   p.integer("pad", 0),
                p.integer("dilation", 1), p.integer("groups", 1), p.integer("bias", 1) != 0};
  return g.conv(in, name, p.required("out"), o);
}

PoolOptions pool(const LayerParams& p) {
  const int k = p.integer("kernel", 2);
  return PoolOptions{k, p.integer("stride", k), p.integer("pad", 0), p.integer("ceil", 0) != 0};
}

float real(const LayerParams& p, const char* key, double fallback) {
  return static_cast<float>(p.number(key, fallback));
}

const std::map<std::string, Kind>& kinds() {
  static const std::map<std::string, Kind> table{
      single("conv", {"out", "kernel", "kh", "kw", "stride", "pad", "dilation", "groups", "bias"}, conv),
      single("dense", {"out", "bias"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.dense(in, name, p.required("out"), p.integer("bias", 1) != 0);
             }),
      single("batch_norm", {"eps", "momentum"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.batch_norm(in, name, real(p, "eps", 1e-5), real(p, "momentum", 0.1));
             }),
      single("relu", {},
             [](Graph& g, int in, const std::string& name, const LayerParams&) {
               return g.activation(in, name, ActKind::kRelu);
             }),
      single("tanh", {},
             [](Graph& g, int in, const std::string& name, const LayerParams&) {
               return g.activation(in, name, ActKind::kTanh);
             }),
      single("sigmoid", {},
             [](Graph& g, int in, const std::string& name, const LayerParams&) {
               return g.activation(in, name, ActKind::kSigmoid);
             }),
      single("leaky_relu", {"alpha"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.activation(in, name, ActKind::kLeakyRelu, real(p, "alpha", 0.01));
             }),
      single("elu", {"alpha"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.activation(in, name, ActKind::kElu, real(p, "alpha", 1.0));
             }),
      single("max_pool", {"kernel", "stride", "pad", "ceil"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.max_pool(in, name, pool(p));
             }),
      single("avg_pool", {"kernel", "stride", "pad", "ceil"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.avg_pool(in, name, pool(p));
             }),
      single("global_avg_pool", {},
             [](Graph& g, int in, const std::string& name, const LayerParams&) { return g.global_avg_pool(in, name); }),
      single("flatten", {},
             [](Graph& g, int in, const std::string& name, const LayerParams&) { return g.flatten(in, name); }),
      {"concat", Kind{{},
                      [](Graph& g, const std::string& name, const std::vector<int>& in, const LayerParams&) {
                        return g.concat(in, name);
                      }}},
      {"add", Kind{{},
                   [](Graph& g, const std::string& name, const std::vector<int>& in, const LayerParams&) {
                     return g.add(in, name);
                   }}},
      single("lrn", {"size", "alpha", "beta", "k"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.lrn(in, name, p.integer("size", 5), real(p, "alpha", 1e-4), real(p, "beta", 0.75),
                            real(p, "k", 1.0));
             }),
      single("dropout", {"p"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.dropout(in, name, real(p, "p", 0.5));
             }),
      single("shortcut_a", {"out", "stride"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.shortcut_a(in, name, p.required("out"), p.integer("stride", 2));
             }),
      single("softmax_xent", {"smoothing"},
             [](Graph& g, int in, const std::string& name, const LayerParams& p) {
               return g.softmax_xent(in, name, real(p, "smoothing", 0.0));
             }),
  };
  return table;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

LayerParams::LayerParams(std::string_view text, std::string layer) : layer_(std::move(layer)) {
  std::string s(text);
  for (char& c : s)
    if (c == ',' || c == '\t' || c == '\n') c = ' ';
  std::istringstream in(s);
  std::string item;
  while (in >> item) {
    auto eq = item.find('=');
    require(eq != std::string::npos && eq > 0, "layer '", layer_, "': parameter '", item, "' is not key=value");
    values_[item.substr(0, eq)] = item.substr(eq + 1);
  }
}

double LayerParams::number(const std::string& key, double fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  require(!it->second.empty() && end && *end == '\0', "layer '", layer_, "': ", key, "='", it->second,
          "' is not a number");
  return v;
}

int LayerParams::integer(const std::string& key, int fallback) const {
  const double v = number(key, fallback);
  require(v == static_cast<double>(static_cast<int>(v)), "layer '", layer_, "': ", key, "=", v, " must be an integer");
  return static_cast<int>(v);
}

int LayerParams::required(const std::string& key) const {
  require(values_.count(key) != 0, "layer '", layer_, "': parameter '", key, "' is required");
  return integer(key, 0);
}

void LayerParams::check_keys(const std::string& kind) const {
  auto it = kinds().find(kind);
  if (it == kinds().end())
    fail(Code::kInvalidArgument, "unknown layer kind '", kind, "'; valid kinds: ", joined(layer_kinds()));
  const std::vector<std::string>& keys = it->second.keys;
  for (const auto& [key, value] : values_) {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    fail(Code::kInvalidArgument, "layer '", layer_, "': unknown parameter '", key, "' for ", kind,
         keys.empty() ? " (it takes none)" : "; allowed: " + joined(keys));
  }
}

int add_layer(Graph& g, const std::string& kind, const std::string& name, std::vector<int> inputs,
              std::string_view params) {
  if (inputs.empty()) inputs.push_back(g.num_layers() - 1);
  const LayerParams p(params, name);
  p.check_keys(kind);  // before the graph changes
  return kinds().at(kind).build(g, name, inputs, p);
}

std::vector<std::string> layer_kinds() {
  std::vector<std::string> out;
  for (const auto& [kind, entry] : kinds()) out.push_back(kind);
  return out;
}

}  // namespace cohort
