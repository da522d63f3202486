// Layers named by kind with their parameters as text, as the C API's layer builder
// (cohort_model_add_layer) takes them: "key=value" items separated by spaces, commas,
// tabs or newlines. One table in layer_params.cc says, for every kind, the keys it
// takes and how they and their defaults become a Graph builder call.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace cohort {

// The "key=value" items of one layer's parameter text (a later item with the same key
// wins). Errors name the layer.
class LayerParams {
 public:
  // Throws kInvalidArgument for an item that is not key=value.
  LayerParams(std::string_view text, std::string layer);

  // The value of `key` as a number, or `fallback` when the text does not set it;
  // throws kInvalidArgument when it is not a number (or, for integer(), not a whole one).
  double number(const std::string& key, double fallback) const;
  int integer(const std::string& key, int fallback) const;
  // integer() of a key the text must set.
  int required(const std::string& key) const;
  // Throws kInvalidArgument for a kind that is not in the table (listing the kinds), or
  // a key that `kind` does not take (listing those it does).
  void check_keys(const std::string& kind) const;

 private:
  std::string layer_;
  std::map<std::string, std::string> values_;
};

// Adds a layer of `kind` named `name` to `g` and returns its index. `inputs` empty: the
// layer reads the last one. The parameter text is parsed and its keys checked before
// the graph changes; then the kind's builder runs with the table's defaults for the
// keys the text leaves out.
int add_layer(Graph& g, const std::string& kind, const std::string& name, std::vector<int> inputs,
              std::string_view params);

// The kinds add_layer() knows, in the order "add, avg_pool, batch_norm, …".
std::vector<std::string> layer_kinds();

}  // namespace cohort
