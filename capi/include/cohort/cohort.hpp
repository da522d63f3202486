/**
 * @file cohort.hpp
 * @brief cohort for C++: a header-only RAII layer over the C API (C++17).
 *
 * Every class owns one C handle and destroys it with its `cohort_*_destroy()`; classes
 * move but do not copy (Config copies, through cohort_config_clone()). A failing call
 * throws cohort::Error, which carries the ::cohort_status_t and cohort_last_error()'s
 * message (it names the function, the key or value, and what was expected). Nothing
 * here adds behaviour: each member is one C call, documented in the C header it
 * names, with the same ownership, collective and thread-safety rules. As there, child
 * objects keep their runtime alive, an optimizer keeps its model alive, and the
 * public structs (cohort_runtime_info_t, cohort_train_stats_t, ...) are returned with
 * their struct_size set.
 *
 * @code
 * cohort::Config cfg;
 * cfg.parse_args(argc, argv, COHORT_PARSE_STRICT);
 * cohort::Runtime rt(cfg);                               // collective
 * cohort::Model model(rt, "mnist_cnn", cfg);
 * cohort::Pipeline train = cohort::Pipeline::for_model(model, cfg);
 * cohort::Optimizer opt(model, cfg);
 * opt.broadcast(0);                                      // collective
 * for (int64_t s = 0; s < steps; ++s) {
 *   cohort_batch_t batch = train.next();
 *   cohort_train_stats_t st = opt.train_step(batch);     // collective
 * }
 * @endcode
 */
#ifndef COHORT_COHORT_HPP
#define COHORT_COHORT_HPP

#if !defined(__cplusplus) || __cplusplus < 201703L
#  error "cohort.hpp needs C++17 or later; C programs include <cohort/cohort.h>"
#endif

#include <cohort/cohort.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cohort {

/** A failed C call: its status and cohort_last_error()'s message. */
class Error : public std::runtime_error {
 public:
  /** The failed call's status and message. */
  Error(cohort_status_t status, const std::string& message) : std::runtime_error(message), status_(status) {}
  /** The C status, e.g. ::COHORT_ERR_INVALID_ARGUMENT. */
  cohort_status_t status() const noexcept { return status_; }
  /** The status's name, e.g. "invalid argument" (cohort_status_string()). */
  const char* status_text() const noexcept { return cohort_status_string(status_); }

 private:
  cohort_status_t status_;
};

/** Throws cohort::Error unless @p status is ::COHORT_OK. */
inline void check(cohort_status_t status) {
  if (status != COHORT_OK) throw Error(status, cohort_last_error());
}

namespace detail {

// A public struct, zeroed, with its struct_size set.
template <class T>
T sized() {
  T value{};
  value.struct_size = sizeof(T);
  return value;
}

// Owns one C handle.
template <class T, void (*Destroy)(T*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T* p) noexcept : p_(p) {}
  Handle(Handle&& other) noexcept : p_(std::exchange(other.p_, nullptr)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      p_ = std::exchange(other.p_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  T* get() const noexcept { return p_; }
  void reset() noexcept {
    if (p_) Destroy(std::exchange(p_, nullptr));
  }

 private:
  T* p_ = nullptr;
};

// Text from a C call that fills (buffer, size, needed): called again with the size it
// asked for while the buffer was too small.
template <class Fill>
std::string text(Fill fill) {
  std::string s(256, '\0');
  size_t needed = 0;
  cohort_status_t status = fill(&s[0], s.size(), &needed);
  // Text that grows between two calls (a pipeline's verdict) asks again.
  for (int tries = 0; status != COHORT_OK && needed > s.size() && tries < 8; ++tries) {
    s.assign(needed, '\0');
    status = fill(&s[0], s.size(), &needed);
  }
  check(status);
  s.resize(std::strlen(s.c_str()));
  return s;
}

template <class T>
constexpr bool is_char_v =
    std::is_same_v<T, char> || std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char> ||
    std::is_same_v<T, wchar_t> || std::is_same_v<T, char16_t> || std::is_same_v<T, char32_t>;

template <class T>
constexpr DLDataType dl_type() {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "a view holds numbers");
  const uint8_t code = std::is_floating_point_v<T> ? kDLFloat : std::is_signed_v<T> ? kDLInt : kDLUInt;
  return DLDataType{code, static_cast<uint8_t>(8 * sizeof(T)), 1};
}

}  // namespace detail

/** cohort_version_string(): "MAJOR.MINOR.PATCH". */
inline std::string version_string() { return cohort_version_string(); }
/** cohort_finalize(): ends MPI once every runtime is destroyed. */
inline void finalize() { check(cohort_finalize()); }

/** Every option key of the registry, in its order (cohort_option_name()). */
inline std::vector<std::string> option_names() {
  std::vector<std::string> names;
  for (size_t i = 0, n = cohort_option_count(); i < n; ++i) names.emplace_back(cohort_option_name(i));
  return names;
}
/** cohort_option_describe(): type, default, bounds, choices, group and help of a key. */
inline cohort_option_info_t describe_option(const std::string& key) {
  auto info = detail::sized<cohort_option_info_t>();
  check(cohort_option_describe(key.c_str(), &info));
  return info;
}
/** cohort_build_info(): what this build of libcohort holds. */
inline cohort_build_info_t build_info() {
  auto info = detail::sized<cohort_build_info_t>();
  check(cohort_build_info(&info));
  return info;
}

/**
 * A DLTensor view of the caller's contiguous host memory, with the shape it points to
 * (copies point to their own). Borrowed: the memory outlives the view and every call
 * given it.
 */
template <class T>
class View {
 public:
  /** A view of @p data, row-major with @p shape. */
  View(T* data, std::vector<int64_t> shape) : shape_(std::move(shape)) {
    tensor_.data = const_cast<std::remove_const_t<T>*>(data);
    tensor_.device = DLDevice{kDLCPU, 0};
    tensor_.dtype = detail::dl_type<std::remove_const_t<T>>();
    point();
  }
  /** Copies and moves point to their own shape. */
  View(const View& other) : tensor_(other.tensor_), shape_(other.shape_) { point(); }
  /** Views what @p other views. */
  View& operator=(const View& other) {
    tensor_ = other.tensor_;
    shape_ = other.shape_;
    point();
    return *this;
  }
  /** Views what @p other viewed. */
  View(View&& other) noexcept : tensor_(other.tensor_), shape_(std::move(other.shape_)) {
    point();
    other.forget();
  }
  /** Views what @p other viewed. */
  View& operator=(View&& other) noexcept {
    if (this != &other) {
      tensor_ = other.tensor_;
      shape_ = std::move(other.shape_);
      point();
      other.forget();
    }
    return *this;
  }

  /** The DLTensor to hand to a call. */
  DLTensor* get() noexcept { return &tensor_; }
  /** The DLTensor to hand to a call. */
  const DLTensor* get() const noexcept { return &tensor_; }
  /** The shape the view was made with. */
  const std::vector<int64_t>& shape() const noexcept { return shape_; }

 private:
  void point() noexcept {
    tensor_.ndim = static_cast<int32_t>(shape_.size());
    tensor_.shape = shape_.data();
    tensor_.strides = nullptr;
    tensor_.byte_offset = 0;
  }
  // A moved-from view views nothing.
  void forget() noexcept {
    shape_.clear();
    tensor_.data = nullptr;
    point();
  }

  DLTensor tensor_{};
  std::vector<int64_t> shape_;
};

/**
 * A tensor the library handed over (DLManagedTensor): its deleter runs on destruction.
 * A device result (kDLCUDA) goes back to the runtime's cache then, for the next device
 * collectives: destroy it only once the GPU work that reads it has completed (see
 * cohort_request_output()).
 */
class Tensor {
 public:
  Tensor() = default;
  /** Takes ownership of @p managed. */
  explicit Tensor(DLManagedTensor* managed) noexcept : managed_(managed) {}
  /** Moves ownership; the moved-from tensor is empty. */
  Tensor(Tensor&& other) noexcept : managed_(std::exchange(other.managed_, nullptr)) {}
  /** Releases this tensor, then takes @p other's. */
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      reset();
      managed_ = std::exchange(other.managed_, nullptr);
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { reset(); }

  /** The tensor (shape, dtype, device, data). */
  const DLTensor& dl() const noexcept { return managed_->dl_tensor; }
  /** Whether it holds a tensor. */
  explicit operator bool() const noexcept { return managed_ != nullptr; }
  /** Its shape. */
  std::vector<int64_t> shape() const {
    if (!managed_) return {};
    return std::vector<int64_t>(dl().shape, dl().shape + dl().ndim);
  }
  /** Its number of elements. */
  int64_t numel() const noexcept {
    if (!managed_) return 0;
    int64_t n = 1;
    for (int32_t i = 0; i < dl().ndim; ++i) n *= dl().shape[i];
    return n;
  }
  /** The data, read as @p T (the caller knows the dtype): host memory for host inputs. */
  template <class T>
  const T* data() const noexcept {
    return reinterpret_cast<const T*>(static_cast<const char*>(dl().data) + dl().byte_offset);
  }
  /** Hands the DLManagedTensor back to the caller, who then calls its deleter. */
  DLManagedTensor* release() noexcept { return std::exchange(managed_, nullptr); }

 private:
  void reset() noexcept {
    if (DLManagedTensor* m = std::exchange(managed_, nullptr); m && m->deleter) m->deleter(m);
  }
  DLManagedTensor* managed_ = nullptr;
};

/** Options (cohort_config_t): the registry's snake_case keys. */
class Config {
 public:
  Config() {
    cohort_config_t* c = nullptr;
    check(cohort_config_create(&c));
    h_ = H(c);
  }
  /** Takes ownership of @p config. */
  explicit Config(cohort_config_t* config) noexcept : h_(config) {}
  /** A copy holds the same values and changes apart (cohort_config_clone()). */
  Config(const Config& other) : h_(clone(other)) {}
  /** Replaces the values with a copy of @p other's. */
  Config& operator=(const Config& other) {
    if (this != &other) h_ = H(clone(other));
    return *this;
  }
  /** The moved-from config holds nothing. */
  Config(Config&&) noexcept = default;
  /** Takes @p other's values; @p other holds nothing. */
  Config& operator=(Config&& other) noexcept = default;

  /** cohort_config_set(): the value as text, checked as the option's type. */
  Config& set(const std::string& key, const std::string& value) {
    check(cohort_config_set(get(), key.c_str(), value.c_str()));
    return *this;
  }
  /** As set(const std::string&, const std::string&). */
  Config& set(const std::string& key, const char* value) {
    check(cohort_config_set(get(), key.c_str(), value));  // NULL: the C call names it
    return *this;
  }
  /** cohort_config_set_bool(). */
  Config& set(const std::string& key, bool value) {
    check(cohort_config_set_bool(get(), key.c_str(), value ? 1 : 0));
    return *this;
  }
  template <class I,
            std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool> && !detail::is_char_v<I>, int> = 0>
  /** cohort_config_set_int(), for any integer type. */
  Config& set(const std::string& key, I value) {
    check(cohort_config_set_int(get(), key.c_str(), static_cast<int64_t>(value)));
    return *this;
  }
  template <class F, std::enable_if_t<std::is_floating_point_v<F>, int> = 0>
  /** cohort_config_set_float(). */
  Config& set(const std::string& key, F value) {
    check(cohort_config_set_float(get(), key.c_str(), static_cast<double>(value)));
    return *this;
  }
  /** A character or an enum is no option value: pass text or a number. */
  template <class C, std::enable_if_t<detail::is_char_v<C> || std::is_enum_v<C>, int> = 0>
  Config& set(const std::string& key, C value) = delete;
  /** cohort_config_unset(): the environment or the default applies again. */
  Config& unset(const std::string& key) {
    check(cohort_config_unset(get(), key.c_str()));
    return *this;
  }

  /** cohort_config_get(): the value as text, whatever its length. */
  std::string get(const std::string& key) const {
    return detail::text(
        [&](char* b, size_t n, size_t* needed) { return cohort_config_get(get(), key.c_str(), b, n, needed); });
  }
  /** cohort_config_get_int(). */
  int64_t get_int(const std::string& key) const {
    int64_t v = 0;
    check(cohort_config_get_int(get(), key.c_str(), &v));
    return v;
  }
  /** cohort_config_get_float() (INT options too). */
  double get_float(const std::string& key) const {
    double v = 0;
    check(cohort_config_get_float(get(), key.c_str(), &v));
    return v;
  }
  /** cohort_config_get_bool(). */
  bool get_bool(const std::string& key) const {
    int v = 0;
    check(cohort_config_get_bool(get(), key.c_str(), &v));
    return v != 0;
  }
  /** cohort_config_source(): default, environment or explicit. */
  cohort_option_source_t source(const std::string& key) const {
    cohort_option_source_t s = COHORT_SOURCE_DEFAULT;
    check(cohort_config_source(get(), key.c_str(), &s));
    return s;
  }
  /**
   * cohort_config_parse_args(): consumes the registry's options and returns what it
   * hands back (argv[0] first, then the program's own arguments; pointers into
   * @p argv). On an error the config is unchanged.
   */
  std::vector<char*> parse_args(int argc, char** argv, unsigned flags = 0) {
    std::vector<char*> rest(static_cast<size_t>(argc > 0 ? argc : 0) + 1, nullptr);
    int n = 0;
    check(cohort_config_parse_args(get(), argc, argv, flags, &n, rest.data()));
    rest.resize(static_cast<size_t>(n));
    return rest;
  }

  /** The C handle, for calls this layer does not wrap (still owned here). */
  cohort_config_t* get() const noexcept { return h_.get(); }

 private:
  using H = detail::Handle<cohort_config_t, cohort_config_destroy>;
  static cohort_config_t* clone(const Config& other) {
    cohort_config_t* c = nullptr;
    check(cohort_config_clone(other.get(), &c));
    return c;
  }
  H h_;
};

/** A runtime (cohort_runtime_t): MPI, the ranks, the device, the collective engine. */
class Runtime {
 public:
  /** Collective (cohort_runtime_create()); @p config is copied. */
  explicit Runtime(const Config& config) : Runtime(config.get()) {}
  /** Collective, with the defaults and the environment's COHORT_<KEY> values. */
  Runtime() : Runtime(static_cast<const cohort_config_t*>(nullptr)) {}

  /** This process's rank. */
  int rank() const {
    int r = 0;
    check(cohort_runtime_rank(get(), &r));
    return r;
  }
  /** The number of ranks. */
  int size() const {
    int s = 0;
    check(cohort_runtime_size(get(), &s));
    return s;
  }
  /** cohort_runtime_info(): ranks, node, thread budget, device. */
  cohort_runtime_info_t info() const {
    auto info = detail::sized<cohort_runtime_info_t>();
    check(cohort_runtime_info(get(), &info));
    return info;
  }
  /** Where models compute, e.g. "cpu" or "cuda:0". */
  std::string device() const {
    return detail::text([&](char* b, size_t n, size_t* needed) { return cohort_runtime_device(get(), b, n, needed); });
  }
  /** A copy of the options the runtime runs with. */
  Config config() const {
    cohort_config_t* c = nullptr;
    check(cohort_runtime_config(get(), &c));
    return Config(c);
  }
  /** cohort_runtime_cpu_times(). */
  cohort_cpu_times_t cpu_times() const {
    auto t = detail::sized<cohort_cpu_times_t>();
    check(cohort_runtime_cpu_times(get(), &t));
    return t;
  }
  /** cohort_runtime_engine_stats(): what the collective engine has done. */
  cohort_engine_stats_t engine_stats() const {
    auto s = detail::sized<cohort_engine_stats_t>();
    check(cohort_runtime_engine_stats(get(), &s));
    return s;
  }
  /** cohort_runtime_memory_stats(): the compute device's cache (device_id -1 on the CPU). */
  cohort_memory_stats_t memory_stats() const {
    auto s = detail::sized<cohort_memory_stats_t>();
    check(cohort_runtime_memory_stats(get(), &s));
    return s;
  }
  /** cohort_runtime_empty_cache(): unused cached device memory goes back to the device. */
  void empty_cache() { check(cohort_runtime_empty_cache(get())); }
  /** Collective. */
  void barrier() { check(cohort_runtime_barrier(get())); }
  /** cohort_runtime_mark_step(): a step boundary for the timeline and the stall inspector. */
  void mark_step() { check(cohort_runtime_mark_step(get())); }

  /** The C handle (still owned here). */
  cohort_runtime_t* get() const noexcept { return h_.get(); }

 private:
  explicit Runtime(const cohort_config_t* config) {
    cohort_runtime_t* r = nullptr;
    check(cohort_runtime_create(config, &r));
    h_ = H(r);
  }
  using H = detail::Handle<cohort_runtime_t, cohort_runtime_destroy>;
  H h_;
};

class Pipeline;

/** One parameter of a model: its name and views of its value and gradient. */
struct Param {
  std::string name; /**< Its name, e.g. "conv1.weight". */
  DLTensor value;   /**< A view of its value (f32, host), valid while the model lives. */
  DLTensor grad;    /**< A view of its gradient, written by backward. */
};

/** The geometry a model takes (cohort_model_io_shape()). */
struct IoShape {
  int64_t channels = 0;    /**< C of a {C, H, W} input, or F of a flat {F} one. */
  int64_t height = 0;      /**< H (1 for a flat input). */
  int64_t width = 0;       /**< W (1 for a flat input). */
  int64_t num_classes = 0; /**< Outputs (classes). */
};

/** A network (cohort_model_t): from the zoo by name, or built layer by layer. */
class Model {
 public:
  /** From the zoo (cohort_model_create()); local. */
  Model(Runtime& runtime, const std::string& name, const Config& config) : Model(runtime, name, config.get()) {}
  /** From the zoo with the runtime's options. */
  Model(Runtime& runtime, const std::string& name) : Model(runtime, name, nullptr) {}
  /** An empty network for add_layer() (cohort_model_create_custom()). */
  static Model custom(Runtime& runtime, const Config& config, const std::vector<int64_t>& input_shape) {
    cohort_model_t* m = nullptr;
    check(cohort_model_create_custom(runtime.get(), config.get(), input_shape.data(), input_shape.size(), &m));
    return Model(m);
  }
  /** Moves the model and its gradient callback. */
  Model(Model&&) noexcept = default;
  /** Releases this model (and clears its callback), then takes @p other's. */
  Model& operator=(Model&& other) noexcept {
    if (this != &other) {
      drop_grad_ready();
      h_ = std::move(other.h_);
      grad_ready_ = std::move(other.grad_ready_);
    }
    return *this;
  }
  ~Model() { drop_grad_ready(); }

  /** cohort_model_add_layer(): the new layer's index. @p inputs empty: the last layer. */
  int add_layer(const std::string& kind, const std::string& name, const std::vector<int>& inputs = {},
                const std::string& params = "") {
    int index = -1;
    check(cohort_model_add_layer(get(), kind.c_str(), name.c_str(), inputs.empty() ? nullptr : inputs.data(),
                                 inputs.size(), params.c_str(), &index));
    return index;
  }
  /** Trainable values in all. */
  int64_t num_params() const {
    int64_t n = 0;
    check(cohort_model_num_params(get(), &n));
    return n;
  }
  /** The layer table (cohort_model_summary()). */
  std::string summary() const {
    return detail::text([&](char* b, size_t n, size_t* needed) { return cohort_model_summary(get(), b, n, needed); });
  }
  /** The image geometry and classes it takes. */
  IoShape io_shape() const {
    IoShape s;
    check(cohort_model_io_shape(get(), &s.channels, &s.height, &s.width, &s.num_classes));
    return s;
  }
  /** Per-layer timing on or off. */
  void set_profiling(bool enabled) { check(cohort_model_set_profiling(get(), enabled ? 1 : 0)); }
  /** The per-layer timing table (cohort_model_profile()). */
  std::string profile() const {
    return detail::text([&](char* b, size_t n, size_t* needed) { return cohort_model_profile(get(), b, n, needed); });
  }
  /** Allocates and initialises the parameters now (else on first use). */
  void materialize() { check(cohort_model_materialize(get())); }
  /** Parameter tensors, the index range of param(). */
  size_t num_tensors() const {
    size_t n = 0;
    check(cohort_model_num_tensors(get(), &n));
    return n;
  }
  /** Parameter @p index: its name and views of its value and gradient. */
  Param param(size_t index) {
    const char* name = nullptr;
    Param p{};
    check(cohort_model_param(get(), index, &name, &p.value, &p.grad));
    p.name = name ? name : "";
    return p;
  }
  /**
   * cohort_model_set_grad_ready(): @p fn(index) runs on the thread that runs backward,
   * once per parameter, last layer first; an empty function clears it. It must not
   * throw (an exception escaping it ends the program). An Optimizer made afterwards
   * installs its own instead.
   */
  void set_grad_ready(std::function<void(size_t)> fn) {
    if (!fn) {
      check(cohort_model_set_grad_ready(get(), nullptr, nullptr));
      grad_ready_.reset();
      return;
    }
    auto held = std::make_unique<std::function<void(size_t)>>(std::move(fn));
    check(cohort_model_set_grad_ready(get(), &Model::call_grad_ready, held.get()));
    grad_ready_ = std::move(held);
  }

  /** Inference: @p output receives the logits [N, classes]. */
  void forward(const DLTensor& images, DLTensor& output) { check(cohort_model_forward(get(), &images, &output)); }
  /** The mean loss of a batch, without gradients. */
  float loss(const DLTensor& images, const DLTensor& labels) {
    float l = 0;
    check(cohort_model_loss(get(), &images, &labels, &l));
    return l;
  }
  /** Forward and backward: the gradients of the mean loss, which it returns. */
  float forward_backward(const DLTensor& images, const DLTensor& labels) {
    float l = 0;
    check(cohort_model_forward_backward(get(), &images, &labels, &l));
    return l;
  }
  /** Collective: top-1/top-5 and loss over @p max_steps batches (0: one epoch). */
  cohort_eval_result_t evaluate(Pipeline& pipeline, int64_t max_steps = 0);

  /** The C handle (still owned here). */
  cohort_model_t* get() const noexcept { return h_.get(); }

 private:
  friend class Optimizer;
  explicit Model(cohort_model_t* m) noexcept : h_(m) {}
  Model(Runtime& runtime, const std::string& name, const cohort_config_t* config) {
    cohort_model_t* m = nullptr;
    check(cohort_model_create(runtime.get(), name.c_str(), config, &m));
    h_ = H(m);
  }
  static void call_grad_ready(void* user, size_t index) noexcept {
    (*static_cast<std::function<void(size_t)>*>(user))(index);
  }
  // The C model may outlive this object (an optimizer keeps it): it must not call a
  // function this object owned.
  void drop_grad_ready() noexcept {
    if (grad_ready_ && h_.get()) cohort_model_set_grad_ready(h_.get(), nullptr, nullptr);
    grad_ready_.reset();
  }
  // An optimizer replaced the callback: nothing calls ours any more.
  void forget_grad_ready() noexcept { grad_ready_.reset(); }

  using H = detail::Handle<cohort_model_t, cohort_model_destroy>;
  std::unique_ptr<std::function<void(size_t)>> grad_ready_;
  H h_;
};

/** An input pipeline (cohort_pipeline_t): reader and decode threads, batches ahead. */
class Pipeline {
 public:
  /** This rank's share of the dataset of `data_dir` (synthetic when empty). */
  Pipeline(const Runtime& runtime, const Config& config) : Pipeline(create(runtime.get(), config.get())) {}
  /** The whole dataset, for one process (no runtime). */
  explicit Pipeline(const Config& config) : Pipeline(create(nullptr, config.get())) {}
  /** Shaped for @p model (cohort_pipeline_create_for_model()). */
  static Pipeline for_model(const Model& model, const Config& config) { return for_model(model, config.get()); }
  /** Shaped for @p model, with the runtime's options. */
  static Pipeline for_model(const Model& model) { return for_model(model, nullptr); }
  /** Over arrays in the caller's memory, which must outlive the pipeline. */
  static Pipeline from_memory(const Runtime* runtime, const Config& config, const DLTensor& images,
                              const DLTensor& labels) {
    cohort_pipeline_t* p = nullptr;
    check(cohort_pipeline_create_from_memory(runtime ? runtime->get() : nullptr, config.get(), &images, &labels, &p));
    return Pipeline(p);
  }

  /** The next batch: views owned by the pipeline, valid until the next call. */
  cohort_batch_t next() {
    auto b = detail::sized<cohort_batch_t>();
    check(cohort_pipeline_next(get(), &b));
    return b;
  }
  /** Continues at batch @p step of @p epoch (resuming a run). */
  void seek(int64_t epoch, int64_t step) { check(cohort_pipeline_seek(get(), epoch, step)); }
  /** The epoch and step of the batch next() returns next. */
  std::pair<int64_t, int64_t> position() const {
    int64_t epoch = 0, step = 0;
    check(cohort_pipeline_position(get(), &epoch, &step));
    return {epoch, step};
  }
  /** cohort_pipeline_info(): dataset size, steps per epoch, geometry, threads. */
  cohort_pipeline_info_t info() const {
    auto info = detail::sized<cohort_pipeline_info_t>();
    check(cohort_pipeline_info(get(), &info));
    return info;
  }
  /** Batches per epoch, the same on every rank. */
  int64_t steps_per_epoch() const {
    int64_t n = 0;
    check(cohort_pipeline_steps_per_epoch(get(), &n));
    return n;
  }
  /** cohort_pipeline_stats(): per-stage counts, times and the limiting stage. */
  cohort_pipeline_stats_t stats() const {
    auto s = detail::sized<cohort_pipeline_stats_t>();
    check(cohort_pipeline_stats(get(), &s));
    return s;
  }
  /** What bounds the pipeline's rate, in a sentence (cohort_pipeline_verdict()). */
  std::string verdict() const {
    return detail::text(
        [&](char* b, size_t n, size_t* needed) { return cohort_pipeline_verdict(get(), b, n, needed); });
  }

  /** The C handle (still owned here). */
  cohort_pipeline_t* get() const noexcept { return h_.get(); }

 private:
  explicit Pipeline(cohort_pipeline_t* p) noexcept : h_(p) {}
  static cohort_pipeline_t* create(const cohort_runtime_t* runtime, const cohort_config_t* config) {
    cohort_pipeline_t* p = nullptr;
    check(cohort_pipeline_create(runtime, config, &p));
    return p;
  }
  static Pipeline for_model(const Model& model, const cohort_config_t* config) {
    cohort_pipeline_t* p = nullptr;
    check(cohort_pipeline_create_for_model(model.get(), config, &p));
    return Pipeline(p);
  }
  using H = detail::Handle<cohort_pipeline_t, cohort_pipeline_destroy>;
  H h_;
};

inline cohort_eval_result_t Model::evaluate(Pipeline& pipeline, int64_t max_steps) {
  auto result = detail::sized<cohort_eval_result_t>();
  check(cohort_model_evaluate(get(), pipeline.get(), max_steps, &result));
  return result;
}

/** The learning rate of the next update and the updates taken. */
struct OptimizerState {
  double lr = 0;     /**< Learning rate of the next update. */
  int64_t steps = 0; /**< Updates taken. */
};

/** An optimizer bound to one model (cohort_optimizer_t), averaging over the ranks. */
class Optimizer {
 public:
  /** Local, in the same order on every rank; installs the model's gradient callback. */
  Optimizer(Model& model, const Config& config) : Optimizer(model, config.get()) {}
  /** With the runtime's options. */
  explicit Optimizer(Model& model) : Optimizer(model, nullptr) {}

  /** The run's length, for the learning-rate schedule. */
  void set_run_length(int64_t steps_per_epoch, int64_t total_steps) {
    check(cohort_optimizer_set_run_length(get(), steps_per_epoch, total_steps));
  }
  /** The next update's learning rate and the updates taken. */
  OptimizerState state() const {
    OptimizerState s;
    check(cohort_optimizer_state(get(), &s.lr, &s.steps));
    return s;
  }
  /** cohort_optimizer_info(): its kind, mode and roles. */
  cohort_optimizer_info_t info() const {
    auto info = detail::sized<cohort_optimizer_info_t>();
    check(cohort_optimizer_info(get(), &info));
    return info;
  }
  /** Collective: every rank's parameters and state become @p root's. */
  void broadcast(int root = 0) { check(cohort_optimizer_broadcast(get(), root)); }
  /** Collective: throws ::COHORT_ERR_MISMATCH naming the first parameter that differs. */
  void check_consistency() { check(cohort_optimizer_check_consistency(get())); }
  /** Collective: forward, backward, the gradients' exchange and the update. */
  cohort_train_stats_t train_step(const cohort_batch_t& batch) {
    auto stats = detail::sized<cohort_train_stats_t>();
    check(cohort_optimizer_train_step(get(), &batch, &stats));
    return stats;
  }
  /** Collective. @p info gives the position to resume from; its struct_size is set here. */
  void save_checkpoint(const std::string& dir, cohort_checkpoint_info_t info) {
    info.struct_size = sizeof info;
    check(cohort_optimizer_save_checkpoint(get(), dir.c_str(), &info));
  }
  /** Collective: the saved position, or nothing when @p dir holds no checkpoint. */
  std::optional<cohort_checkpoint_info_t> load_checkpoint(const std::string& dir) {
    auto info = detail::sized<cohort_checkpoint_info_t>();
    int found = 0;
    check(cohort_optimizer_load_checkpoint(get(), dir.c_str(), &info, &found));
    if (!found) return std::nullopt;
    return info;
  }

  /** The C handle (still owned here). */
  cohort_optimizer_t* get() const noexcept { return h_.get(); }

 private:
  Optimizer(Model& model, const cohort_config_t* config) {
    cohort_optimizer_t* o = nullptr;
    check(cohort_optimizer_create(model.get(), config, &o));
    h_ = H(o);
    model.forget_grad_ready();
  }
  using H = detail::Handle<cohort_optimizer_t, cohort_optimizer_destroy>;
  H h_;
};

/** Per-step timings and their summary, as tf_cnn_benchmarks reports them. */
class Metrics {
 public:
  /** The first @p warmup_steps records are not measured. */
  explicit Metrics(int64_t warmup_steps) {
    cohort_metrics_t* m = nullptr;
    check(cohort_metrics_create(warmup_steps, &m));
    h_ = H(m);
  }
  /** One step: its seconds, those waiting for data and for communication, its images. */
  void record(double seconds, double data_wait_s, double comm_exposed_s, double images) {
    check(cohort_metrics_record(get(), seconds, data_wait_s, comm_exposed_s, images));
  }
  /** Median, mean and spread of the measured steps' images/sec. */
  cohort_rate_summary_t summary() const {
    auto s = detail::sized<cohort_rate_summary_t>();
    check(cohort_metrics_summary(get(), &s));
    return s;
  }
  /** The C handle (still owned here). */
  cohort_metrics_t* get() const noexcept { return h_.get(); }

 private:
  using H = detail::Handle<cohort_metrics_t, cohort_metrics_destroy>;
  H h_;
};

/**
 * One collective in flight (cohort_request_t). Destroying it waits for it first, at most
 * `request_destroy_wait_s` (cohort_request_destroy()): keep its tensors alive until it
 * has completed, also when an exception unwinds past it.
 */
class Request {
 public:
  /** Takes ownership of @p r. */
  explicit Request(cohort_request_t* r) noexcept : h_(r) {}

  /** Whether it has completed, successfully or not. */
  bool test() {
    int done = 0;
    check(cohort_request_test(get(), &done));
    return done != 0;
  }
  /** Blocks until it completes; throws its error. */
  void wait() { check(cohort_request_wait(get())); }
  /** The result of a completed allgather, alltoallv or reducescatter. */
  Tensor output() {
    DLManagedTensor* m = nullptr;
    check(cohort_request_output(get(), &m));
    return Tensor(m);
  }
  /** Rows received from each rank by a completed alltoallv. */
  std::vector<int64_t> recv_splits(size_t ranks) {
    std::vector<int64_t> splits(ranks, 0);
    check(cohort_request_recv_splits(get(), splits.data(), splits.size()));
    return splits;
  }
  /** The rank that joined last, for a completed join. */
  int last_joined() {
    int rank = -1;
    check(cohort_request_last_joined(get(), &rank));
    return rank;
  }
  /** The C handle (still owned here). */
  cohort_request_t* get() const noexcept { return h_.get(); }

 private:
  using H = detail::Handle<cohort_request_t, cohort_request_destroy>;
  H h_;
};

/** cohort_allreduce_options_t for @p op, with its scales. */
inline cohort_allreduce_options_t allreduce_options(cohort_reduce_op_t op = COHORT_REDUCE_SUM, double prescale = 1.0,
                                                    double postscale = 1.0) {
  cohort_allreduce_options_t o{};
  check(cohort_allreduce_options_default(&o));
  o.op = op;
  o.prescale = prescale;
  o.postscale = postscale;
  return o;
}

// The collectives (collectives.h). Every rank submits each name once, with the same
// shape and dtype; the tensors stay alive and untouched until the request completes.

/** Starts an allreduce; @p output null: in place. */
inline Request allreduce_async(Runtime& runtime, const std::string& name, DLTensor& input, DLTensor* output = nullptr,
                               const cohort_allreduce_options_t& options = allreduce_options()) {
  cohort_request_t* r = nullptr;
  check(cohort_allreduce_async(runtime.get(), name.c_str(), &input, output, &options, &r));
  return Request(r);
}
/** Blocking allreduce. */
inline void allreduce(Runtime& runtime, const std::string& name, DLTensor& input, DLTensor* output = nullptr,
                      const cohort_allreduce_options_t& options = allreduce_options()) {
  check(cohort_allreduce(runtime.get(), name.c_str(), &input, output, &options));
}
/** @p output null: in place (on the root, @p input is sent; elsewhere it receives). */
inline Request broadcast_async(Runtime& runtime, const std::string& name, DLTensor& input, int root,
                               DLTensor* output = nullptr) {
  cohort_request_t* r = nullptr;
  check(cohort_broadcast_async(runtime.get(), name.c_str(), &input, output, root, &r));
  return Request(r);
}
/** Blocking broadcast. */
inline void broadcast(Runtime& runtime, const std::string& name, DLTensor& input, int root,
                      DLTensor* output = nullptr) {
  check(cohort_broadcast(runtime.get(), name.c_str(), &input, output, root));
}
/** Every rank's rows, in rank order: the result comes from Request::output(). */
inline Request allgather_async(Runtime& runtime, const std::string& name, const DLTensor& input) {
  cohort_request_t* r = nullptr;
  check(cohort_allgather_async(runtime.get(), name.c_str(), &input, &r));
  return Request(r);
}
/** Blocking allgather: every rank's rows, in rank order. */
inline Tensor allgather(Runtime& runtime, const std::string& name, const DLTensor& input) {
  DLManagedTensor* m = nullptr;
  check(cohort_allgather(runtime.get(), name.c_str(), &input, &m));
  return Tensor(m);
}
/** Rows @p send_splits[q] of @p input go to rank q. */
inline Request alltoallv_async(Runtime& runtime, const std::string& name, const DLTensor& input,
                               const std::vector<int64_t>& send_splits) {
  cohort_request_t* r = nullptr;
  check(cohort_alltoallv_async(runtime.get(), name.c_str(), &input, send_splits.data(), send_splits.size(), &r));
  return Request(r);
}
/** Starts a reducescatter of the first dimension's rows; the result comes from Request::output(). */
inline Request reducescatter_async(Runtime& runtime, const std::string& name, const DLTensor& input,
                                   cohort_reduce_op_t op = COHORT_REDUCE_SUM) {
  cohort_request_t* r = nullptr;
  check(cohort_reducescatter_async(runtime.get(), name.c_str(), &input, op, &r));
  return Request(r);
}
/** Blocking reducescatter. */
inline Tensor reducescatter(Runtime& runtime, const std::string& name, const DLTensor& input,
                            cohort_reduce_op_t op = COHORT_REDUCE_SUM) {
  DLManagedTensor* m = nullptr;
  check(cohort_reducescatter(runtime.get(), name.c_str(), &input, op, &m));
  return Tensor(m);
}
/** Collective: returns once every rank has called it. */
inline void barrier(Runtime& runtime) { check(cohort_barrier(runtime.get())); }
/** This rank has no more data; returns the rank that joined last. */
inline int join(Runtime& runtime) {
  int last = -1;
  check(cohort_join(runtime.get(), &last));
  return last;
}

}  // namespace cohort

#endif /* COHORT_COHORT_HPP */
