// The model shim: translates to train::Model (zoo and custom networks, inference,
// loss, forward/backward) and parses the layer builder's parameter text.
#include "cohort/model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "core/strings.h"
#include "handles.h"
#include "models/zoo.h"
#include "runtime/mpi_process.h"
#include "shim.h"
#include "structs.h"
#include "train/model_data.h"

using namespace cohort;
using capi::guard;
using capi::need;

namespace {

Config config_of(const cohort_runtime_t* rt, const cohort_config_t* config) {
  return config ? config->config : rt->runtime->config();
}

std::shared_ptr<Runtime> runtime_of(const cohort_runtime_t* runtime) {
  need(runtime, "runtime");
  mpi_process::check_not_poisoned();
  return runtime->runtime;
}

train::Model& live(cohort_model_t* m) {
  need(m, "model");
  mpi_process::check_not_poisoned();
  return *m->model;
}
const train::Model& live(const cohort_model_t* m) {
  need(m, "model");
  return *m->model;
}

void materialize(cohort_model_t& m) {
  m.model->materialize();
  if (!m.views.empty()) return;
  for (const Parameter& p : m.model->graph().params()) {
    m.views.push_back(p.value.dlpack_view());
    m.views.push_back(p.grad.dlpack_view());
  }
}

// ---- layer parameters: "key=value key=value" ----
class Params {
 public:
  Params(const char* text, const std::string& layer) : layer_(layer) {
    std::string s = text ? text : "";
    for (char& c : s)
      if (c == ',' || c == '\t' || c == '\n') c = ' ';
    std::istringstream in(s);
    std::string item;
    while (in >> item) {
      auto eq = item.find('=');
      require(eq != std::string::npos && eq > 0, "layer '", layer, "': parameter '", item, "' is not key=value");
      values_[item.substr(0, eq)] = item.substr(eq + 1);
    }
  }
  double num(const std::string& key, double fallback) {
    auto it = values_.find(key);
    if (it == values_.end()) return fallback;
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    require(!it->second.empty() && end && *end == '\0', "layer '", layer_, "': ", key, "='", it->second,
            "' is not a number");
    return v;
  }
  int integer(const std::string& key, int fallback) {
    const double v = num(key, fallback);
    require(v == static_cast<double>(static_cast<int>(v)), "layer '", layer_, "': ", key, "=", v,
            " must be an integer");
    return static_cast<int>(v);
  }
  int required(const std::string& key) {
    require(values_.count(key) != 0, "layer '", layer_, "': parameter '", key, "' is required");
    return integer(key, 0);
  }
  void check_keys(const std::string& kind) const {
    static const std::map<std::string, std::vector<std::string>> allowed{
        {"conv", {"out", "kernel", "kh", "kw", "stride", "pad", "dilation", "groups", "bias"}},
        {"dense", {"out", "bias"}},
        {"batch_norm", {"eps", "momentum"}},
        {"relu", {}},
        {"tanh", {}},
        {"sigmoid", {}},
        {"leaky_relu", {"alpha"}},
        {"elu", {"alpha"}},
        {"max_pool", {"kernel", "stride", "pad", "ceil"}},
        {"avg_pool", {"kernel", "stride", "pad", "ceil"}},
        {"global_avg_pool", {}},
        {"flatten", {}},
        {"concat", {}},
        {"add", {}},
        {"lrn", {"size", "alpha", "beta", "k"}},
        {"dropout", {"p"}},
        {"shortcut_a", {"out", "stride"}},
        {"softmax_xent", {"smoothing"}},
    };
    auto it = allowed.find(kind);
    if (it == allowed.end()) {
      std::string kinds;
      for (const auto& [k, v] : allowed) kinds += (kinds.empty() ? "" : ", ") + k;
      fail(Code::kInvalidArgument, "unknown layer kind '", kind, "'; valid kinds: ", kinds);
    }
    for (const auto& [k, v] : values_) {
      if (std::find(it->second.begin(), it->second.end(), k) != it->second.end()) continue;
      std::string keys;
      for (const auto& u : it->second) keys += (keys.empty() ? "" : ", ") + u;
      fail(Code::kInvalidArgument, "layer '", layer_, "': unknown parameter '", k, "' for ", kind,
           keys.empty() ? " (it takes none)" : "; allowed: " + keys);
    }
  }

 private:
  std::string layer_;
  std::map<std::string, std::string> values_;
};

int add_layer(Graph& g, const std::string& kind, const std::string& name, const std::vector<int>& in, Params& p) {
  auto one = [&] {
    require(in.size() == 1, "layer '", name, "': ", kind, " takes one input, got ", in.size());
    return in[0];
  };
  if (kind == "conv") {
    const int k = p.integer("kernel", 3);
    ConvOptions o{p.integer("kh", k),       p.integer("kw", k),     p.integer("stride", 1),   p.integer("pad", 0),
                  p.integer("dilation", 1), p.integer("groups", 1), p.integer("bias", 1) != 0};
    return g.conv(one(), name, p.required("out"), o);
  }
  if (kind == "dense") return g.dense(one(), name, p.required("out"), p.integer("bias", 1) != 0);
  if (kind == "batch_norm")
    return g.batch_norm(one(), name, static_cast<float>(p.num("eps", 1e-5)),
                        static_cast<float>(p.num("momentum", 0.1)));
  if (kind == "relu") return g.activation(one(), name, ActKind::kRelu);
  if (kind == "tanh") return g.activation(one(), name, ActKind::kTanh);
  if (kind == "sigmoid") return g.activation(one(), name, ActKind::kSigmoid);
  if (kind == "leaky_relu")
    return g.activation(one(), name, ActKind::kLeakyRelu, static_cast<float>(p.num("alpha", 0.01)));
  if (kind == "elu") return g.activation(one(), name, ActKind::kElu, static_cast<float>(p.num("alpha", 1.0)));
  if (kind == "max_pool" || kind == "avg_pool") {
    const int k = p.integer("kernel", 2);
    PoolOptions o{k, p.integer("stride", k), p.integer("pad", 0), p.integer("ceil", 0) != 0};
    return kind == "max_pool" ? g.max_pool(one(), name, o) : g.avg_pool(one(), name, o);
  }
  if (kind == "global_avg_pool") return g.global_avg_pool(one(), name);
  if (kind == "flatten") return g.flatten(one(), name);
  if (kind == "concat") return g.concat(in, name);
  if (kind == "add") return g.add(in, name);
  if (kind == "lrn")
    return g.lrn(one(), name, p.integer("size", 5), static_cast<float>(p.num("alpha", 1e-4)),
                 static_cast<float>(p.num("beta", 0.75)), static_cast<float>(p.num("k", 1.0)));
  if (kind == "dropout") return g.dropout(one(), name, static_cast<float>(p.num("p", 0.5)));
  if (kind == "shortcut_a") return g.shortcut_a(one(), name, p.required("out"), p.integer("stride", 2));
  if (kind == "softmax_xent") return g.softmax_xent(one(), name, static_cast<float>(p.num("smoothing", 0.0)));
  fail(Code::kInternal, "layer kind '", kind, "' has no builder");
}

}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_model_create(cohort_runtime_t* runtime, const char* name,
                                               const cohort_config_t* config, cohort_model_t** out) {
  return guard("cohort_model_create", [&] {
    need(out, "out");
    *out = nullptr;
    need(name, "name");
    auto rt = runtime_of(runtime);
    auto m = std::make_unique<cohort_model_t>();
    m->model = train::Model::from_zoo(rt, name, config_of(runtime, config));
    *out = m.release();
  });
}

COHORT_API cohort_status_t cohort_model_create_custom(cohort_runtime_t* runtime, const cohort_config_t* config,
                                                      const int64_t* input_shape, size_t ndim, cohort_model_t** out) {
  return guard("cohort_model_create_custom", [&] {
    need(out, "out");
    *out = nullptr;
    need(input_shape, "input_shape");
    auto rt = runtime_of(runtime);
    require(ndim == 1 || ndim == 3, "input_shape must have 1 ({F}) or 3 ({C, H, W}) dimensions, got ", ndim);
    auto m = std::make_unique<cohort_model_t>();
    m->model = train::Model::custom(rt, Shape(input_shape, input_shape + ndim), config_of(runtime, config));
    *out = m.release();
  });
}

COHORT_API cohort_status_t cohort_model_add_layer(cohort_model_t* model, const char* kind, const char* name,
                                                  const int* inputs, size_t num_inputs, const char* params,
                                                  int* index) {
  return guard("cohort_model_add_layer", [&] {
    Graph& g = live(model).graph();
    need(kind, "kind");
    need(name, "name");
    require(inputs != nullptr || num_inputs == 0, "inputs is NULL but num_inputs is ", num_inputs);
    std::vector<int> in(inputs, inputs + num_inputs);
    if (in.empty()) in.push_back(g.num_layers() - 1);
    Params p(params, name);
    p.check_keys(kind);  // before the graph changes
    const int id = add_layer(g, kind, name, in, p);
    if (index) *index = id;
  });
}

COHORT_API void cohort_model_destroy(cohort_model_t* model) {
  try {
    delete model;
  } catch (...) {
  }
}

COHORT_API cohort_status_t cohort_model_num_params(const cohort_model_t* model, int64_t* count) {
  return guard("cohort_model_num_params", [&] { *need(count, "count") = live(model).graph().num_params(); });
}

COHORT_API cohort_status_t cohort_model_summary(const cohort_model_t* model, char* buffer, size_t size,
                                                size_t* needed) {
  return guard("cohort_model_summary", [&] { capi::copy_out(live(model).graph().summary(), buffer, size, needed); });
}

COHORT_API cohort_status_t cohort_model_io_shape(const cohort_model_t* model, int64_t* channels, int64_t* height,
                                                 int64_t* width, int64_t* num_classes) {
  return guard("cohort_model_io_shape", [&] {
    const train::IoShape io = live(model).io_shape();
    if (channels) *channels = io.channels;
    if (height) *height = io.height;
    if (width) *width = io.width;
    if (num_classes) *num_classes = io.classes;
  });
}

COHORT_API cohort_status_t cohort_model_set_profiling(cohort_model_t* model, int enabled) {
  return guard("cohort_model_set_profiling", [&] { live(model).graph().set_profiling(enabled != 0); });
}

COHORT_API cohort_status_t cohort_model_profile(const cohort_model_t* model, char* buffer, size_t size,
                                                size_t* needed) {
  return guard("cohort_model_profile",
               [&] { capi::copy_out(format_profile(live(model).graph().profile()), buffer, size, needed); });
}

COHORT_API cohort_status_t cohort_model_materialize(cohort_model_t* model) {
  return guard("cohort_model_materialize", [&] {
    live(model);
    materialize(*model);
  });
}

COHORT_API cohort_status_t cohort_model_num_tensors(const cohort_model_t* model, size_t* count) {
  return guard("cohort_model_num_tensors", [&] { *need(count, "count") = live(model).graph().params().size(); });
}

COHORT_API cohort_status_t cohort_model_param(cohort_model_t* model, size_t index, const char** name, DLTensor* value,
                                              DLTensor* grad) {
  return guard("cohort_model_param", [&] {
    const auto& params = live(model).graph().params();
    require(index < params.size(), "parameter index ", index, " is out of range: the model has ", params.size(),
            " parameter tensors");
    materialize(*model);
    if (name) *name = params[index].name.c_str();
    if (value) *value = model->views[2 * index];
    if (grad) *grad = model->views[2 * index + 1];
  });
}

COHORT_API cohort_status_t cohort_model_set_grad_ready(cohort_model_t* model, cohort_grad_ready_fn fn, void* user) {
  return guard("cohort_model_set_grad_ready", [&] {
    train::Model& m = live(model);
    if (fn)
      // The callback's contract: the gradient is final when it runs (a device waits here).
      m.set_grad_ready([fn, user](size_t index, const cohort::Event& ready) {
        ready.synchronize();
        fn(user, index);
      });
    else
      m.set_grad_ready(nullptr);
  });
}

COHORT_API cohort_status_t cohort_model_forward(cohort_model_t* model, const DLTensor* images, DLTensor* output) {
  return guard("cohort_model_forward", [&] {
    train::Model& m = live(model);
    m.forward(capi::tensor_of(images, "images"), capi::tensor_of(output, "output"));
  });
}

COHORT_API cohort_status_t cohort_model_loss(cohort_model_t* model, const DLTensor* images, const DLTensor* labels,
                                             float* loss) {
  return guard("cohort_model_loss", [&] {
    train::Model& m = live(model);
    need(loss, "loss");
    *loss = m.loss(capi::tensor_of(images, "images"), capi::tensor_of(labels, "labels"));
  });
}

COHORT_API cohort_status_t cohort_model_forward_backward(cohort_model_t* model, const DLTensor* images,
                                                         const DLTensor* labels, float* loss) {
  return guard("cohort_model_forward_backward", [&] {
    train::Model& m = live(model);
    const float l = m.forward_backward(capi::tensor_of(images, "images"), capi::tensor_of(labels, "labels"));
    if (loss) *loss = l;
  });
}

COHORT_API cohort_status_t cohort_model_evaluate(cohort_model_t* model, cohort_pipeline_t* pipeline, int64_t max_steps,
                                                 cohort_eval_result_t* result) {
  return guard("cohort_model_evaluate", [&] {
    train::Model& m = live(model);
    data::Pipeline* p = pipeline ? &capi::pipeline_of(pipeline) : nullptr;
    capi::check_struct_size<cohort_eval_result_t>(need(result, "result")->struct_size, "result");
    const EvalResult r = train::evaluate(m, p, max_steps);
    cohort_eval_result_t full{};
    full.samples = r.samples;
    full.top1 = r.top1;
    full.top5 = r.top5;
    full.loss = r.loss;
    capi::write_out(result, full, "result");
  });
}

}  // extern "C"
