/* trainer.c — a small trainer with its own model table, each model built layer by
 * layer with cohort's layer builder (cohort_model_create_custom + cohort_model_add_layer).
 *
 * The exercise (README.md): add alexnet_owt, torchvision's AlexNet. Until then
 * `./trainer --model=alexnet_owt` stops with "Invalid model type: alexnet_owt" and the
 * valid names.
 *
 *   cc trainer.c $(pkg-config --cflags --libs cohort) -o trainer
 *   ./trainer --model=mnist_cnn --summary            # layers, parameters, input, classes
 *   ./trainer --model=mnist_cnn --num_iter=5
 *   cohort-check add-model trainer.c
 *
 * Every flag is a key of cohort's option registry (--model, --batch_size, --num_iter,
 * --summary, --json, ...). It trains on synthetic data unless --data_dir is given. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cohort/cohort.h>

/* A model's layers, appended to `m`: a network that so far has only its input (see the
 * model table below for each model's input shape). */
typedef cohort_status_t (*build_fn)(cohort_model_t* m);

/* Appends one layer after the previous one (NULL inputs: the last layer added). */
#define LAYER(kind, name, params)                                                      \
  do {                                                                                 \
    cohort_status_t s_ = cohort_model_add_layer(m, kind, name, NULL, 0, params, NULL); \
    if (s_ != COHORT_OK) return s_;                                                    \
  } while (0)

/* The labs' Fashion-MNIST CNN: 10 classes, 1,199,882 parameters. */
static cohort_status_t build_mnist_cnn(cohort_model_t* m) {
  LAYER("conv", "conv1", "out=32 kernel=3");
  LAYER("relu", "relu1", "");
  LAYER("conv", "conv2", "out=64 kernel=3");
  LAYER("relu", "relu2", "");
  LAYER("max_pool", "pool", "kernel=2");
  LAYER("flatten", "flatten", "");
  LAYER("dense", "fc1", "out=128");
  LAYER("relu", "relu3", "");
  LAYER("dense", "fc2", "out=10");
  LAYER("softmax_xent", "loss", "");
  return COHORT_OK;
}

/* As cheap as a model can be (1000 classes), so that the input decides the speed. */
static cohort_status_t build_trivial(cohort_model_t* m) {
  LAYER("global_avg_pool", "pool", "");
  LAYER("flatten", "flatten", "");
  LAYER("dense", "fc", "out=1000");
  LAYER("softmax_xent", "loss", "");
  return COHORT_OK;
}

/* The models this trainer knows (step 3 of README.md: add alexnet_owt here). */
static const struct {
  const char* name;
  int64_t input[3]; /* one sample: channels, height, width */
  build_fn build;
} kModels[] = {
    {"mnist_cnn", {1, 28, 28}, build_mnist_cnn}, /* the labs' Fashion-MNIST CNN */
    {"trivial", {3, 224, 224}, build_trivial},   /* global average pool and one dense layer */
};
#define NUM_MODELS (sizeof kModels / sizeof kModels[0])

/* Builds the model named `name`, or says which names are valid. */
static int build_model(cohort_runtime_t* rt, const cohort_config_t* cfg, const char* name, cohort_model_t** out) {
  for (size_t i = 0; i < NUM_MODELS; ++i) {
    if (strcmp(kModels[i].name, name) != 0) continue;
    if (cohort_model_create_custom(rt, cfg, kModels[i].input, 3, out) == COHORT_OK &&
        kModels[i].build(*out) == COHORT_OK)
      return 0;
    fprintf(stderr, "trainer: building %s: %s\n", name, cohort_last_error());
    return 1;
  }
  fprintf(stderr, "trainer: Invalid model type: %s\nvalid models:", name);
  for (size_t i = 0; i < NUM_MODELS; ++i) fprintf(stderr, "%s %s", i ? "," : "", kModels[i].name);
  fprintf(stderr, "\n");
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t get_int(const cohort_config_t* cfg, const char* key) {
  int64_t v = 0;
  cohort_config_get_int(cfg, key, &v);
  return v;
}

static int get_bool(const cohort_config_t* cfg, const char* key) {
  int v = 0;
  cohort_config_get_bool(cfg, key, &v);
  return v;
}

static int failed(const char* what) {
  fprintf(stderr, "trainer: %s: %s\n", what, cohort_last_error());
  return 1;
}

#define CHECK(call, what)                         \
  do {                                            \
    if ((call) != COHORT_OK) return failed(what); \
  } while (0)

typedef struct {
  cohort_config_t* cfg;
  cohort_runtime_t* rt;
  cohort_model_t* model;
  cohort_optimizer_t* opt;
  cohort_pipeline_t* data;
  cohort_metrics_t* metrics;
  int rank, size;
} trainer_t;

/* The layer table, the parameter count and the model's input and output. */
static int print_summary(trainer_t* t) {
  size_t needed = 0;
  cohort_model_summary(t->model, NULL, 0, &needed);
  char* text = malloc(needed ? needed : 1);
  if (!text) return 1;
  cohort_status_t s = cohort_model_summary(t->model, text, needed, NULL);
  if (s == COHORT_OK) fputs(text, stdout);
  free(text);
  int64_t params = 0, c = 0, h = 0, w = 0, classes = 0;
  CHECK(cohort_model_num_params(t->model, &params), "counting the parameters");
  CHECK(cohort_model_io_shape(t->model, &c, &h, &w, &classes), "reading the input shape");
  printf("parameters: %lld\ninput: %lldx%lldx%lld\nclasses: %lld\n", (long long)params, (long long)c, (long long)h,
         (long long)w, (long long)classes);
  return 0;
}

/* A pipeline whose images fit the model (synthetic data unless --data_dir). */
static int open_data(trainer_t* t) {
  int64_t c = 0, h = 0, w = 0, classes = 0;
  CHECK(cohort_model_io_shape(t->model, &c, &h, &w, &classes), "reading the input shape");
  cohort_config_t* pc = NULL;
  CHECK(cohort_config_clone(t->cfg, &pc), "copying the configuration");
  cohort_status_t s = cohort_config_set_int(pc, "image_size", h);
  if (s == COHORT_OK) s = cohort_config_set_int(pc, "synthetic_channels", c);
  if (s == COHORT_OK) s = cohort_config_set_int(pc, "synthetic_classes", classes);
  if (s == COHORT_OK) s = cohort_pipeline_create(t->rt, pc, &t->data);
  cohort_config_destroy(pc);
  CHECK(s, "opening the input pipeline");
  return 0;
}

static int train(trainer_t* t, const char* name) {
  const double start = now_s();
  const int64_t steps = get_int(t->cfg, "num_iter") > 0 ? get_int(t->cfg, "num_iter") : 20;
  const int64_t batch = get_int(t->cfg, "batch_size");
  int64_t warmup = get_int(t->cfg, "num_warmup_batches");
  if (warmup > steps - 1) warmup = steps - 1;
  CHECK(cohort_optimizer_create(t->model, t->cfg, &t->opt), "creating the optimizer");
  CHECK(cohort_optimizer_broadcast(t->opt, 0), "broadcasting the parameters");
  CHECK(cohort_metrics_create(warmup, &t->metrics), "creating the metrics");
  if (open_data(t)) return 1;
  double loss = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const double t0 = now_s();
    cohort_batch_t b = {.struct_size = sizeof b};
    CHECK(cohort_pipeline_next(t->data, &b), "reading a batch");
    const double t1 = now_s();
    cohort_train_stats_t st = {.struct_size = sizeof st};
    CHECK(cohort_optimizer_train_step(t->opt, &b, &st), "training step");
    CHECK(cohort_metrics_record(t->metrics, now_s() - t0, t1 - t0, st.comm_wait_s, (double)(b.valid * t->size)),
          "recording the step");
    loss = st.loss;
    if (t->rank == 0) printf("step %lld: loss %.4f\n", (long long)i + 1, loss);
  }
  cohort_rate_summary_t rates = {.struct_size = sizeof rates};
  CHECK(cohort_metrics_summary(t->metrics, &rates), "summarizing the step times");
  if (t->rank != 0) return 0;
  printf("images/sec: %.1f\n", rates.median);
  if (get_bool(t->cfg, "json")) {
    cohort_run_summary_t rs = {
        .struct_size = sizeof rs, .model = name, .device = "cpu", .precision = "f32", .data = "synthetic"};
    rs.ranks = rs.local_ranks = t->size;
    rs.batch_per_rank = batch;
    rs.global_batch = batch * t->size;
    rs.steps = steps;
    rs.warmup_steps = warmup;
    rs.images_per_sec = rates;
    rs.loss = loss;
    rs.wall_s = now_s() - start;
    char line[2048];
    CHECK(cohort_run_summary_json(&rs, line, sizeof line, NULL), "writing the run summary");
    printf("%s\n", line);
  }
  return 0;
}

static int run(trainer_t* t, int argc, char** argv) {
  CHECK(cohort_config_create(&t->cfg), "creating a configuration");
  CHECK(cohort_config_parse_args(t->cfg, argc, argv, COHORT_PARSE_STRICT, NULL, NULL), "reading the command line");
  CHECK(cohort_runtime_create(t->cfg, &t->rt), "starting the runtime");
  CHECK(cohort_runtime_rank(t->rt, &t->rank), "reading the rank");
  CHECK(cohort_runtime_size(t->rt, &t->size), "reading the number of ranks");
  char name[256] = "";
  CHECK(cohort_config_get(t->cfg, "model", name, sizeof name, NULL), "reading --model");
  if (build_model(t->rt, t->cfg, name, &t->model)) return 1;
  if (get_bool(t->cfg, "summary")) return t->rank == 0 ? print_summary(t) : 0;
  return train(t, name);
}

int main(int argc, char** argv) {
  trainer_t t = {0};
  int status = run(&t, argc, argv);
  cohort_metrics_destroy(t.metrics);
  cohort_pipeline_destroy(t.data);
  cohort_optimizer_destroy(t.opt);
  cohort_model_destroy(t.model);
  cohort_runtime_destroy(t.rt);
  cohort_config_destroy(t.cfg);
  return status;
}
