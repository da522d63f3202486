/**
 * @file model.h
 * @brief Networks: the model zoo, a layer builder for networks of your own,
 *        parameters and gradients as DLPack views, inference, loss and backward.
 *
 * A model is built either from the zoo by name (cohort_model_create()) or layer by
 * layer (cohort_model_create_custom() + cohort_model_add_layer()). Building only
 * infers shapes; parameters are allocated and initialised (from the `seed` option)
 * on the first call that needs them (cohort_model_param(), a forward or
 * cohort_model_materialize()), after which no layer can be added.
 *
 * Parameters and gradients are kept in plain layouts (OIHW for convolutions,
 * [out, in] for dense layers, [C] for biases and batch-norm scales), f32, on the
 * host. Images are f32 in the layout of the `data_format` option (NCHW or NHWC).
 *
 * Thread-safety: a model may be used from one thread at a time; different models
 * may be used concurrently. No call in this header is collective except
 * cohort_model_evaluate().
 */
#ifndef COHORT_MODEL_H
#define COHORT_MODEL_H

#include <dlpack/dlpack.h>

#include "cohort/common.h"
#include "cohort/config.h"
#include "cohort/pipeline.h"
#include "cohort/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque network with its parameters, gradients and compiled execution plans. It
 *  keeps its runtime alive. */
typedef struct cohort_model_t cohort_model_t;

/**
 * @brief Builds a model of the zoo.
 * @param runtime The runtime (kept alive by the model).
 * @param name One of: alexnet, alexnet_owt, googlenet, mnist_cnn, resnet18, resnet34,
 *   resnet50, resnet101, resnet152, resnet20, resnet32, resnet44, resnet56, resnet110,
 *   trivial, vgg16. When @p config sets the option `model` (API, command line or
 *   environment), it must name the same model.
 * @param config Options (may be NULL: the runtime's): `num_classes`, `image_size`
 *   (0 = the model's default), `label_smoothing`, `data_format`, `compute_threads`
 *   (0 = the runtime's thread budget) and `seed`. Copied.
 * @param[out] out Receives the model, owned by the caller (cohort_model_destroy()).
 * @return ::COHORT_ERR_INVALID_ARGUMENT for an unknown name (the message lists the
 *   valid ones), a name other than the `model` option's, or an image size the model
 *   cannot take.
 */
COHORT_API cohort_status_t cohort_model_create(cohort_runtime_t* runtime, const char* name,
                                               const cohort_config_t* config, cohort_model_t** out);

/**
 * @brief Starts an empty network whose layers the caller adds with
 *        cohort_model_add_layer().
 * @param runtime The runtime (kept alive by the model).
 * @param config Options as for cohort_model_create() (may be NULL). The model is named
 *   after the `model` option when it is set, else "custom" (checkpoints record it).
 * @param input_shape Shape of one sample: {C, H, W} for images or {F} for feature vectors.
 * @param ndim 3 or 1.
 * @param[out] out Receives the model, owned by the caller. Its input is layer 0.
 */
COHORT_API cohort_status_t cohort_model_create_custom(cohort_runtime_t* runtime, const cohort_config_t* config,
                                                      const int64_t* input_shape, size_t ndim, cohort_model_t** out);

/**
 * @brief Appends a layer to a network.
 *
 * Kinds and their parameters (`key=value`, separated by spaces or commas; defaults
 * in brackets):
 * - `conv`: out, kernel (or kh, kw) [3], stride [1], pad [0], dilation [1], groups [1], bias [1]
 * - `dense`: out, bias [1]
 * - `batch_norm`: eps [1e-5], momentum [0.1]
 * - `relu`, `tanh`, `sigmoid`; `leaky_relu`: alpha [0.01]; `elu`: alpha [1]
 * - `max_pool`, `avg_pool`: kernel [2], stride [kernel], pad [0], ceil [0]
 * - `global_avg_pool`, `flatten`, `concat` (channels), `add` (two or more inputs)
 * - `lrn`: size [5], alpha [1e-4], beta [0.75], k [1]
 * - `dropout`: p [0.5]
 * - `shortcut_a`: out, stride [2]
 * - `softmax_xent` (the loss; must come last): smoothing [0]
 *
 * @param model A model not yet materialized.
 * @param kind One of the kinds above.
 * @param name Unique layer name; parameters are named "<name>.weight" and "<name>.bias".
 * @param inputs Indices of earlier layers (0 is the input); NULL with @p num_inputs 0
 *   means the last layer added.
 * @param num_inputs Number of entries in @p inputs.
 * @param params Parameter text (may be NULL or "").
 * @param[out] index If not NULL, receives the new layer's index.
 * @return ::COHORT_ERR_INVALID_ARGUMENT for an unknown kind or key, a bad value, or
 *   shapes that do not fit (the message names the layer); the network is unchanged.
 */
COHORT_API cohort_status_t cohort_model_add_layer(cohort_model_t* model, const char* kind, const char* name,
                                                  const int* inputs, size_t num_inputs, const char* params, int* index);

/**
 * @brief Releases a model and its memory. NULL is a no-op.
 * @param model The model; invalid afterwards, as are every DLTensor view of it.
 */
COHORT_API void cohort_model_destroy(cohort_model_t* model);

/**
 * @brief Total number of parameter elements (not counting batch-norm statistics).
 * @param model The model (need not be materialized: nothing is allocated).
 * @param[out] count Receives the count.
 */
COHORT_API cohort_status_t cohort_model_num_params(const cohort_model_t* model, int64_t* count);

/**
 * @brief A table of the layers: name, kind, output shape (per sample) and parameters.
 * @param model The model.
 * @param buffer Receives the NUL-terminated text; may be NULL when @p size is 0.
 * @param size Size of @p buffer in bytes.
 * @param[out] needed If not NULL, receives the size needed including the NUL.
 * @return ::COHORT_ERR_INVALID_ARGUMENT if the buffer is too small.
 */
COHORT_API cohort_status_t cohort_model_summary(const cohort_model_t* model, char* buffer, size_t size, size_t* needed);

/**
 * @brief What a model takes and gives: the per-sample input shape and the number of
 * classes of its output, so a program can configure a matching input pipeline.
 * @param model       The model.
 * @param channels    Receives C of a {C, H, W} input, or the feature count F of a {F}
 *                    input (may be NULL).
 * @param height      Receives H (1 for a {F} input; may be NULL).
 * @param width       Receives W (1 for a {F} input; may be NULL).
 * @param num_classes Receives the length of the output vector (may be NULL).
 * @return ::COHORT_OK or ::COHORT_ERR_INVALID_ARGUMENT (NULL model). Thread-safe.
 */
COHORT_API cohort_status_t cohort_model_io_shape(const cohort_model_t* model, int64_t* channels, int64_t* height,
                                                 int64_t* width, int64_t* num_classes);

/**
 * @brief Starts or stops the per-layer profile of the training steps.
 *
 * While on, every forward and backward pass times each layer's work and the reorders
 * (layout and type conversions, parameter casts, gradient copies) done for it, and
 * cohort_optimizer_train_step() adds its optimizer time and its measured step time.
 * Turning it on starts from zero; timing costs two clock reads per primitive.
 * @param model The model.
 * @param enabled 1 to start (from zero), 0 to stop (the profile stays readable).
 */
COHORT_API cohort_status_t cohort_model_set_profiling(cohort_model_t* model, int enabled);

/**
 * @brief The profile as a table in milliseconds per step: forward, backward, reorder and
 * total time of every layer, the optimizer, the profiled total, and beside it the
 * measured step time (the share of it the profile accounts for).
 * @param model The model.
 * @param buffer Receives the NUL-terminated text; may be NULL when @p size is 0.
 * @param size Size of @p buffer in bytes.
 * @param[out] needed If not NULL, receives the size needed including the NUL.
 * @return ::COHORT_ERR_INVALID_ARGUMENT if the buffer is too small.
 */
COHORT_API cohort_status_t cohort_model_profile(const cohort_model_t* model, char* buffer, size_t size, size_t* needed);

/**
 * @brief Allocates and initialises the parameters now (He-uniform weights from the
 *        `seed` option, zero biases, unit batch-norm scales). Idempotent.
 * @param model The model.
 */
COHORT_API cohort_status_t cohort_model_materialize(cohort_model_t* model);

/**
 * @brief Number of parameter tensors.
 * @param model The model.
 * @param[out] count Receives the number.
 */
COHORT_API cohort_status_t cohort_model_num_tensors(const cohort_model_t* model, size_t* count);

/**
 * @brief Views of parameter tensor @p index and its gradient (materializes the model).
 * @param model The model.
 * @param index 0 ≤ index < cohort_model_num_tensors().
 * @param[out] name If not NULL, receives the stable name ("layer1.0.conv1.weight"),
 *   borrowed: valid while the model lives.
 * @param[out] value If not NULL, receives a view of the parameter (f32, CPU, plain
 *   layout, compact). Its shape pointer is borrowed and valid while the model lives;
 *   the caller may write the data (e.g. an optimizer update).
 * @param[out] grad If not NULL, receives a view of its gradient, like @p value. The
 *   gradient is written by cohort_model_forward_backward().
 */
COHORT_API cohort_status_t cohort_model_param(cohort_model_t* model, size_t index, const char** name, DLTensor* value,
                                              DLTensor* grad);

/**
 * @brief Called with a parameter index as soon as backward has finished its gradient.
 * @param user The pointer given to cohort_model_set_grad_ready().
 * @param index The parameter tensor whose gradient is final.
 */
typedef void (*cohort_grad_ready_fn)(void* user, size_t index);

/**
 * @brief Sets (or clears, with NULL) the gradient-ready callback. It runs on the thread
 *        calling cohort_model_forward_backward() (or the training step), once per
 *        parameter per call, in the order backward finishes them (last layer first).
 *        An optimizer installs its own callback; setting one afterwards replaces it.
 * @param model The model.
 * @param fn The callback, or NULL.
 * @param user Passed to @p fn.
 */
COHORT_API cohort_status_t cohort_model_set_grad_ready(cohort_model_t* model, cohort_grad_ready_fn fn, void* user);

/**
 * @brief Inference: the network's output (logits) for a batch.
 * @param model The model.
 * @param images f32 CPU tensor [N, C, H, W] (or [N, H, W, C] when `data_format` is
 *   NHWC; [N, F] for flat inputs), compact.
 * @param[in,out] output Caller-owned f32 CPU compact tensor [N, classes] receiving the output.
 * @return ::COHORT_ERR_INVALID_ARGUMENT when a shape, dtype or device does not fit
 *   (the message says what was expected).
 */
COHORT_API cohort_status_t cohort_model_forward(cohort_model_t* model, const DLTensor* images, DLTensor* output);

/**
 * @brief Inference loss (mean softmax cross-entropy) of a batch.
 * @param model A model ending in a loss (every zoo model does).
 * @param images As for cohort_model_forward().
 * @param labels int32 CPU tensor [N] of class indices.
 * @param[out] loss Receives the mean loss.
 */
COHORT_API cohort_status_t cohort_model_loss(cohort_model_t* model, const DLTensor* images, const DLTensor* labels,
                                             float* loss);

/**
 * @brief Training forward (dropout on, batch statistics) and backward: overwrites
 *        every gradient (see cohort_model_param()) and calls the gradient-ready
 *        callback for each. The parameters are not updated. While it runs, the
 *        runtime's collective engine may hold agreed reductions back until every
 *        rank has finished its forward/backward (`comm_during_compute`, by default
 *        on the CPU device, where a reduction would only take cores from compute);
 *        a collective that a callback waits for still runs.
 * @param model A model ending in a loss.
 * @param images As for cohort_model_forward().
 * @param labels int32 CPU tensor [N] of class indices.
 * @param[out] loss If not NULL, receives the mean loss of the batch.
 */
COHORT_API cohort_status_t cohort_model_forward_backward(cohort_model_t* model, const DLTensor* images,
                                                         const DLTensor* labels, float* loss);

/** @brief Evaluation over a whole evaluation set, summed over ranks. */
typedef struct cohort_eval_result_t {
  size_t struct_size; /**< Set by the caller to sizeof(cohort_eval_result_t). */
  int64_t samples;    /**< Valid samples evaluated on all ranks (padding never counts). */
  double top1;        /**< Fraction in [0, 1] whose label scored highest. */
  double top5;        /**< Fraction in [0, 1] whose label is among the 5 highest. */
  double loss;        /**< Mean cross-entropy over those samples. */
} cohort_eval_result_t;

/**
 * @brief Collective: evaluates the model on @p max_steps batches of @p pipeline (0: one
 * epoch, cohort_pipeline_steps_per_epoch()), then sums the counts of all ranks.
 * Inference mode (no dropout, running batch-norm statistics). Every rank's pipeline
 * must yield the same number of batches (the pipeline guarantees it per epoch).
 * @param model     The model.
 * @param pipeline  The evaluation pipeline (e.g. `data_split=validation`, `augment=none`);
 *                  NULL on a rank without data (a dedicated parameter server), which then
 *                  only takes part in the sum.
 * @param max_steps Batches to evaluate; 0 means one epoch.
 * @param result    Receives the result, identical on every rank; set its struct_size.
 * @return ::COHORT_OK or an error (bad shapes, label out of range, communication).
 */
COHORT_API cohort_status_t cohort_model_evaluate(cohort_model_t* model, cohort_pipeline_t* pipeline, int64_t max_steps,
                                                 cohort_eval_result_t* result);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_MODEL_H */
