// The model shim: translates to train::Model (zoo and custom networks, inference,
// loss, forward/backward) and to the layer builder of graph/layer_params.h.
#include "cohort/model.h"

#include <vector>

#include "graph/layer_params.h"
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
    const int id = add_layer(g, kind, name, std::vector<int>(inputs, inputs + num_inputs), params ? params : "");
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
