// The model shim: zoo and layer builder, parameters as DLPack views, inference,
// loss and backward.
#include "cohort/model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "backend/backend.h"
#include "core/strings.h"
#include "handles.h"
#include "model_handle.h"
#include "models/zoo.h"
#include "runtime/mpi_process.h"
#include "shim.h"

using namespace cohort;
using capi::guard;
using capi::need;

namespace {

Config config_of(const cohort_runtime_t* rt, const cohort_config_t* config) {
  return config ? config->config : rt->runtime->config();
}

std::unique_ptr<cohort_model_t> new_model(cohort_runtime_t* runtime, const Config& cfg) {
  need(runtime, "runtime");
  mpi_process::check_not_poisoned();
  auto m = std::make_unique<cohort_model_t>();
  m->runtime = runtime->runtime;
  m->layout = cfg.get_string("data_format") == "NHWC" ? Layout::kNHWC : Layout::kNCHW;
  m->seed = static_cast<uint64_t>(cfg.get_int("seed"));
  return m;
}

void attach_backend(cohort_model_t& m, const Config& cfg) {
  int threads = static_cast<int>(cfg.get_int("compute_threads"));
  if (threads <= 0) threads = m.runtime->thread_budget();
  m.graph->set_backend(backend::make_cpu_backend(threads));
  m.graph->set_precision(backend::parse_precision(cfg.get_string("precision")));
  m.graph->set_dropout_seed(m.seed);
  m.graph->add_grad_ready([mp = &m](int index, const Parameter&) {
    if (mp->grad_ready) mp->grad_ready(mp->grad_ready_user, static_cast<size_t>(index));
  });
}

cohort_model_t& live(cohort_model_t* m) {
  need(m, "model");
  mpi_process::check_not_poisoned();
  return *m;
}
const cohort_model_t& live(const cohort_model_t* m) {
  need(m, "model");
  return *m;
}

void materialize(cohort_model_t& m) {
  if (m.graph->materialized()) return;
  m.graph->materialize(m.seed);
  for (const Parameter& p : m.graph->params()) {
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

// ---- DLPack checks ----
int64_t check_f32(const DLTensor* t, const char* what, int ndim) {
  need(t, what);
  require(t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost, what,
          " must be host memory (kDLCPU), got device type ", static_cast<int>(t->device.device_type));
  require(t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1, what, " must be float32");
  require(t->ndim == ndim, what, " must have ", ndim, " dimensions, got ", t->ndim);
  require(t->data != nullptr, what, "->data is NULL");
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    require(!t->strides || t->shape[i] == 1 || t->strides[i] == expect, what, " must be compact (row-major)");
    expect *= t->shape[i];
  }
  return t->shape[0];
}

std::string dims_of(const DLTensor* t) {
  Shape s(t->shape, t->shape + t->ndim);
  return shape_string(s);
}

// The batch size of images, checked against the network's input shape and layout.
int64_t check_images(const cohort_model_t& m, const DLTensor* images) {
  const Shape& in = m.graph->shape(0);
  const int64_t n = check_f32(images, "images", static_cast<int>(in.size()) + 1);
  Shape want{n};
  if (in.size() == 3 && m.layout == Layout::kNHWC)
    want.insert(want.end(), {in[1], in[2], in[0]});
  else
    want.insert(want.end(), in.begin(), in.end());
  require(n > 0 && Shape(images->shape, images->shape + images->ndim) == want, "images have shape ", dims_of(images),
          " but the model takes ", shape_string(want),
          in.size() == 3 ? (m.layout == Layout::kNHWC ? " (data_format=NHWC)" : " (data_format=NCHW)") : "");
  return n;
}

const int32_t* check_labels(const DLTensor* labels, int64_t n) {
  need(labels, "labels");
  require(labels->device.device_type == kDLCPU || labels->device.device_type == kDLCUDAHost,
          "labels must be host memory (kDLCPU)");
  require(labels->dtype.code == kDLInt && labels->dtype.bits == 32 && labels->dtype.lanes == 1, "labels must be int32");
  require(labels->ndim == 1 && labels->shape[0] == n, "labels must have shape [", n, "], got ", dims_of(labels));
  require(!labels->strides || labels->strides[0] == 1, "labels must be compact");
  require(labels->data != nullptr, "labels->data is NULL");
  return reinterpret_cast<const int32_t*>(static_cast<const char*>(labels->data) + labels->byte_offset);
}

const float* data_of(const DLTensor* t) {
  return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + t->byte_offset);
}

}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_model_create(cohort_runtime_t* runtime, const char* name,
                                               const cohort_config_t* config, cohort_model_t** out) {
  return guard("cohort_model_create", [&] {
    need(out, "out");
    *out = nullptr;
    need(name, "name");
    need(runtime, "runtime");
    const Config cfg = config_of(runtime, config);
    auto m = new_model(runtime, cfg);
    ModelOptions o;
    o.num_classes = static_cast<int>(cfg.get_int("num_classes"));
    o.image_size = static_cast<int>(cfg.get_int("image_size"));
    o.label_smoothing = static_cast<float>(cfg.get_float("label_smoothing"));
    m->graph = build_model(name, o);
    attach_backend(*m, cfg);
    *out = m.release();
  });
}

COHORT_API cohort_status_t cohort_model_create_custom(cohort_runtime_t* runtime, const cohort_config_t* config,
                                                      const int64_t* input_shape, size_t ndim, cohort_model_t** out) {
  return guard("cohort_model_create_custom", [&] {
    need(out, "out");
    *out = nullptr;
    need(input_shape, "input_shape");
    need(runtime, "runtime");
    require(ndim == 1 || ndim == 3, "input_shape must have 1 ({F}) or 3 ({C, H, W}) dimensions, got ", ndim);
    const Config cfg = config_of(runtime, config);
    auto m = new_model(runtime, cfg);
    m->graph = std::make_unique<Graph>(Shape(input_shape, input_shape + ndim));
    attach_backend(*m, cfg);
    *out = m.release();
  });
}

COHORT_API cohort_status_t cohort_model_add_layer(cohort_model_t* model, const char* kind, const char* name,
                                                  const int* inputs, size_t num_inputs, const char* params,
                                                  int* index) {
  return guard("cohort_model_add_layer", [&] {
    cohort_model_t& m = live(model);
    need(kind, "kind");
    need(name, "name");
    require(inputs != nullptr || num_inputs == 0, "inputs is NULL but num_inputs is ", num_inputs);
    std::vector<int> in(inputs, inputs + num_inputs);
    if (in.empty()) in.push_back(m.graph->num_layers() - 1);
    Params p(params, name);
    p.check_keys(kind);  // before the graph changes
    const int id = add_layer(*m.graph, kind, name, in, p);
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
  return guard("cohort_model_num_params", [&] { *need(count, "count") = live(model).graph->num_params(); });
}

COHORT_API cohort_status_t cohort_model_summary(const cohort_model_t* model, char* buffer, size_t size,
                                                size_t* needed) {
  return guard("cohort_model_summary", [&] { capi::copy_out(live(model).graph->summary(), buffer, size, needed); });
}

COHORT_API cohort_status_t cohort_model_set_profiling(cohort_model_t* model, int enabled) {
  return guard("cohort_model_set_profiling", [&] { live(model).graph->set_profiling(enabled != 0); });
}

COHORT_API cohort_status_t cohort_model_profile(const cohort_model_t* model, char* buffer, size_t size,
                                                size_t* needed) {
  return guard("cohort_model_profile",
               [&] { capi::copy_out(format_profile(live(model).graph->profile()), buffer, size, needed); });
}

COHORT_API cohort_status_t cohort_model_materialize(cohort_model_t* model) {
  return guard("cohort_model_materialize", [&] { materialize(live(model)); });
}

COHORT_API cohort_status_t cohort_model_num_tensors(const cohort_model_t* model, size_t* count) {
  return guard("cohort_model_num_tensors", [&] { *need(count, "count") = live(model).graph->params().size(); });
}

COHORT_API cohort_status_t cohort_model_param(cohort_model_t* model, size_t index, const char** name, DLTensor* value,
                                              DLTensor* grad) {
  return guard("cohort_model_param", [&] {
    cohort_model_t& m = live(model);
    const size_t n = m.graph->params().size();
    require(index < n, "parameter index ", index, " is out of range: the model has ", n, " parameter tensors");
    materialize(m);
    if (name) *name = m.graph->params()[index].name.c_str();
    if (value) *value = m.views[2 * index];
    if (grad) *grad = m.views[2 * index + 1];
  });
}

COHORT_API cohort_status_t cohort_model_set_grad_ready(cohort_model_t* model, cohort_grad_ready_fn fn, void* user) {
  return guard("cohort_model_set_grad_ready", [&] {
    cohort_model_t& m = live(model);
    m.grad_ready = fn;
    m.grad_ready_user = user;
  });
}

COHORT_API cohort_status_t cohort_model_forward(cohort_model_t* model, const DLTensor* images, DLTensor* output) {
  return guard("cohort_model_forward", [&] {
    cohort_model_t& m = live(model);
    const int64_t n = check_images(m, images);
    const int layer = m.graph->output_layer();
    const Shape& os = m.graph->shape(layer);
    check_f32(output, "output", static_cast<int>(os.size()) + 1);
    Shape want{n};
    want.insert(want.end(), os.begin(), os.end());
    require(Shape(output->shape, output->shape + output->ndim) == want, "output has shape ", dims_of(output),
            " but the model gives ", shape_string(want));
    materialize(m);
    m.graph->infer(data_of(images), n, m.layout,
                   reinterpret_cast<float*>(static_cast<char*>(output->data) + output->byte_offset), layer);
  });
}

COHORT_API cohort_status_t cohort_model_loss(cohort_model_t* model, const DLTensor* images, const DLTensor* labels,
                                             float* loss) {
  return guard("cohort_model_loss", [&] {
    cohort_model_t& m = live(model);
    need(loss, "loss");
    require(m.graph->has_loss(), "the model has no loss layer: add a softmax_xent layer last");
    const int64_t n = check_images(m, images);
    const int32_t* y = check_labels(labels, n);
    materialize(m);
    *loss = m.graph->eval_loss(data_of(images), n, m.layout, y);
  });
}

COHORT_API cohort_status_t cohort_model_forward_backward(cohort_model_t* model, const DLTensor* images,
                                                         const DLTensor* labels, float* loss) {
  return guard("cohort_model_forward_backward", [&] {
    cohort_model_t& m = live(model);
    require(m.graph->has_loss(), "the model has no loss layer: add a softmax_xent layer last");
    const int64_t n = check_images(m, images);
    const int32_t* y = check_labels(labels, n);
    materialize(m);
    // Reductions of gradients produced here may wait until compute has ended on every
    // rank (comm_during_compute=hold), instead of taking cores from it.
    struct Bracket {
      comm::Engine& engine;
      explicit Bracket(comm::Engine& e) : engine(e) { engine.compute_begin(); }
      ~Bracket() { engine.compute_end(); }
    } bracket(m.runtime->engine());
    const float l = m.graph->forward_train(data_of(images), n, m.layout, y);
    m.graph->backward();
    if (loss) *loss = l;
  });
}

}  // extern "C"
