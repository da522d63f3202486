#include "train/model.h"

#include "backend/backend.h"
#include "backend/precision.h"
#include "core/logging.h"
#include "core/status.h"
#include "models/zoo.h"
#include "train/instrument.h"

namespace cohort::train {
namespace {

// The backend of the runtime's compute device; compute_threads = 0 takes the
// runtime's thread budget (the CPU backend's OpenMP team).
std::shared_ptr<backend::Backend> make_backend(Runtime& runtime, const Config& config) {
  int threads = static_cast<int>(config.get_int("compute_threads"));
  if (threads <= 0) threads = runtime.thread_budget();
  backend::BackendOptions o;
  o.tf32 = backend::parse_tf32(config.get_string("tf32"));
  o.cuda_graphs = config.get_string("cuda_graphs") == "on";
  o.batch_norm = backend::parse_cuda_batch_norm(config.get_string("cuda_batch_norm"));
  o.algorithm_cache = config.get_string("cuda_algorithm_cache");
  if (!runtime.device().is_host()) o.memory = runtime.memory().on(runtime.device());
  return backend::make_backend(runtime.device(), threads, o);
}

// `type` spells the dtype as DLPack users know it ("float32").
void check_compact(const Tensor& t, const char* what, DType dtype, const char* type, Device device) {
  require(t.device().is_host() || t.device() == device, what, " must be host memory (kDLCPU)",
          device.is_host() ? std::string() : cat(" or on ", device.to_string()), ", got ", t.device().to_string());
  require(t.dtype() == dtype, what, " must be ", type, ", got ", dtype_name(t.dtype()));
  require(t.is_contiguous(), what, " must be compact (row-major)");
  require(t.data() != nullptr || t.numel() == 0, what, "->data is NULL");
}

}  // namespace

Model::Model(std::shared_ptr<Runtime> runtime, std::string name, std::unique_ptr<Graph> graph, const Config& config)
    : runtime_(std::move(runtime)), name_(std::move(name)), graph_(std::move(graph)) {
  layout_ = config.get_string("data_format") == "NHWC" ? Layout::kNHWC : Layout::kNCHW;
  seed_ = instrument::init_seed(config, static_cast<uint64_t>(config.get_int("seed")));
  const Device device = runtime_->device();
  auto backend = make_backend(*runtime_, config);
  if (!device.is_host() && runtime_->rank() == 0)
    COHORT_LOG_INFO("model '", name_, "' computes on ", backend->describe());
  graph_->set_backend(std::move(backend), device.is_host() ? nullptr : runtime_->memory().on(device));
  graph_->set_precision(backend::parse_precision(config.get_string("precision")));
  graph_->set_pointwise_backward(backend::parse_pointwise_backward(config.get_string("cpu_pointwise_backward")));
  graph_->set_dropout_seed(seed_);
  graph_->add_grad_ready([this](int index, const Parameter&, const Event& ready) {
    if (grad_ready_) grad_ready_(static_cast<size_t>(index), ready);
  });
}

std::shared_ptr<Model> Model::from_zoo(std::shared_ptr<Runtime> runtime, const std::string& name,
                                       const Config& config) {
  runtime->check_open("creating a model");
  if (config.is_explicit("model")) {
    const std::string option = config.get_string("model");
    require(option == name, "the model name '", name, "' disagrees with the option model=", option,
            " of the configuration; pass the same name, or unset the option");
  }
  ModelOptions o;
  o.num_classes = static_cast<int>(config.get_int("num_classes"));
  o.image_size = static_cast<int>(config.get_int("image_size"));
  o.label_smoothing = static_cast<float>(config.get_float("label_smoothing"));
  return std::shared_ptr<Model>(new Model(std::move(runtime), name, build_model(name, o), config));
}

std::shared_ptr<Model> Model::custom(std::shared_ptr<Runtime> runtime, const Shape& input, const Config& config) {
  runtime->check_open("creating a model");
  require(input.size() == 1 || input.size() == 3, "the input shape must have 1 ({F}) or 3 ({C, H, W}) dimensions, got ",
          input.size());
  std::string name = config.is_explicit("model") ? config.get_string("model") : "custom";
  return std::shared_ptr<Model>(new Model(std::move(runtime), std::move(name), std::make_unique<Graph>(input), config));
}

IoShape Model::io_shape() const {
  IoShape s;
  const Shape& in = graph_->shape(0);
  s.channels = in.empty() ? 0 : in[0];
  s.height = in.size() == 3 ? in[1] : 1;
  s.width = in.size() == 3 ? in[2] : 1;
  const Shape& out = graph_->shape(graph_->output_layer());
  s.classes = out.empty() ? 0 : out[0];
  return s;
}

void Model::materialize() {
  runtime_->check_open("materializing a model");
  if (!graph_->materialized()) graph_->materialize(seed_);
}

uint64_t Model::set_grad_ready(GradReady hook, bool enqueues) {
  grad_ready_ = std::move(hook);
  graph_->set_grad_ready_enqueues(grad_ready_ && enqueues);
  return ++grad_ready_token_;
}

void Model::clear_grad_ready(uint64_t token) {
  if (token != grad_ready_token_) return;
  grad_ready_ = nullptr;
  graph_->set_grad_ready_enqueues(false);
}

int64_t Model::check_images(const Tensor& images) const {
  check_compact(images, "images", DType::kF32, "float32", device());
  const Shape& in = graph_->shape(0);
  const int64_t n = images.ndim() > 0 ? images.dim(0) : 0;
  Shape want{n};
  if (in.size() == 3 && layout_ == Layout::kNHWC)
    want.insert(want.end(), {in[1], in[2], in[0]});
  else
    want.insert(want.end(), in.begin(), in.end());
  require(n > 0 && images.shape() == want, "images have shape ", shape_string(images.shape()), " but the model takes ",
          shape_string(want),
          in.size() == 3 ? (layout_ == Layout::kNHWC ? " (data_format=NHWC)" : " (data_format=NCHW)") : "");
  return n;
}

void Model::check_labels(const Tensor& labels, int64_t n) const {
  check_compact(labels, "labels", DType::kI32, "int32", device());
  require(labels.shape() == Shape{n}, "labels must have shape [", n, "], got ", shape_string(labels.shape()));
}

void Model::require_loss() const {
  require(graph_->has_loss(), "the model has no loss layer: add a softmax_xent layer last");
}

void Model::check_label_values(const Tensor& labels) const {
  // The CPU plan checks labels as it reads them; a device reads them only in its
  // kernels, after the whole step is enqueued, so labels still in host memory are
  // checked here (a device batch's come from a pipeline that checked them).
  if (device().is_host() || !labels.device().is_host()) return;
  const int64_t classes = io_shape().classes;
  const int32_t* l = labels.data_as<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    require(l[i] >= 0 && l[i] < classes, "label ", l[i], " of sample ", i, " is outside [0, ", classes, ")");
}

Tensor Model::on_device(const Tensor& t) const {
  if (device().is_host() || t.device() == device()) return t;
  return clone_to(t, *runtime_->memory().on(device()), stream());
}

float Model::forward_backward(const Tensor& images, const Tensor& labels) {
  require_loss();
  const int64_t n = check_images(images);
  check_labels(labels, n);
  check_label_values(labels);
  materialize();
  // Reductions of gradients produced here may wait until compute has ended on every
  // rank (comm_during_compute=hold), instead of taking cores from it.
  ComputeBracket bracket(runtime_->engine());
  graph_->forward(on_device(images), layout_, on_device(labels));
  graph_->backward();
  return graph_->loss();  // after backward is enqueued: a device waits for the loss only now
}

void Model::forward(const Tensor& images, const Tensor& output) {
  const int64_t n = check_images(images);
  const int layer = graph_->output_layer();
  Shape want{n};
  const Shape& os = graph_->shape(layer);
  want.insert(want.end(), os.begin(), os.end());
  check_compact(output, "output", DType::kF32, "float32", device());
  require(output.shape() == want, "output has shape ", shape_string(output.shape()), " but the model gives ",
          shape_string(want));
  materialize();
  graph_->infer(on_device(images), layout_, output, layer);
}

float Model::loss(const Tensor& images, const Tensor& labels) {
  require_loss();
  const int64_t n = check_images(images);
  check_labels(labels, n);
  check_label_values(labels);
  materialize();
  return graph_->eval_loss(on_device(images), layout_, on_device(labels));
}

}  // namespace cohort::train
