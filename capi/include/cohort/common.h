/**
 * @file common.h
 * @brief Export macro, status codes, per-thread error text and version queries.
 *
 * Every fallible cohort function returns a ::cohort_status_t. On failure the text of
 * the error, prefixed with the name of the failing function, is available on the
 * same thread through cohort_last_error() until the next failing call on that thread.
 */
#ifndef COHORT_COMMON_H
#define COHORT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/version.h"

/** @def COHORT_API
 *  Marks a function as part of cohort's exported C API. */
#if defined(_WIN32)
#  if defined(COHORT_BUILDING_LIBRARY)
#    define COHORT_API __declspec(dllexport)
#  else
#    define COHORT_API __declspec(dllimport)
#  endif
#else
#  define COHORT_API __attribute__((visibility("default")))
#endif

/** @def COHORT_DEPRECATED
 *  Marks a function as deprecated and names its replacement. */
#if defined(__GNUC__) || defined(__clang__)
#  define COHORT_DEPRECATED(replacement) __attribute__((deprecated("use " #  replacement " instead")))
#else
#  define COHORT_DEPRECATED(replacement)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Result of every fallible call. Values are fixed and only ever appended.
 *
 * Usage errors are below 100; system and library errors have a range each
 * (100: memory and files, 200: MPI, 300: CUDA/NCCL, 400: JPEG, 500: oneDNN).
 */
typedef enum cohort_status_t {
  COHORT_OK = 0,                      /**< Success. */
  COHORT_ERR_INVALID_ARGUMENT = 1,    /**< A bad key, value, name, shape or pointer. */
  COHORT_ERR_INVALID_STATE = 2,       /**< The call is not allowed now (e.g. after cohort_finalize()). */
  COHORT_ERR_UNSUPPORTED = 3,         /**< Valid, but this build or device cannot do it. */
  COHORT_ERR_MISMATCH = 4,            /**< Ranks disagree (shape, dtype, op, root of a collective). */
  COHORT_ERR_STALLED = 5,             /**< A collective was not submitted by every rank in time. */
  COHORT_ERR_CANCELLED = 6,           /**< The request was cancelled (shutdown or an earlier error). */
  COHORT_ERR_END_OF_DATA = 7,         /**< A source has no more data. */
  COHORT_ERR_PEER_SHUTDOWN = 8,       /**< A rank shut down its runtime without submitting this collective:
                                           it can never complete; that rank's own error output says why. */
  COHORT_ERR_OUT_OF_MEMORY = 100,     /**< An allocation failed. */
  COHORT_ERR_IO = 101,                /**< A file could not be opened, read or written. */
  COHORT_ERR_CORRUPT_DATA = 102,      /**< A file or record is malformed (CRC, length, format). */
  COHORT_ERR_INTERNAL = 103,          /**< A bug in cohort: please report it with the message. */
  COHORT_ERR_MPI = 200,               /**< An MPI call failed. */
  COHORT_ERR_PEER_LOST = 201,         /**< A rank is gone; the runtime is poisoned. */
  COHORT_ERR_CUDA = 300,              /**< A CUDA runtime call failed. */
  COHORT_ERR_NCCL = 301,              /**< An NCCL call failed. */
  COHORT_ERR_CUDNN = 302,             /**< A cuDNN call failed. */
  COHORT_ERR_CUBLAS = 303,            /**< A cuBLAS call failed. */
  COHORT_ERR_JPEG = 400,              /**< libjpeg-turbo could not decode an image. */
  COHORT_ERR_DNNL = 500,              /**< A oneDNN call failed. */
  COHORT_STATUS_MAX_ENUM = 0x7FFFFFFF /**< Not a status: keeps the enum 32-bit for any value. */
} cohort_status_t;

/**
 * @brief Static text naming a status, e.g. "invalid argument".
 * @param status Any value; unknown values give "unknown status".
 * @return A string with static storage duration. Thread-safe.
 */
COHORT_API const char* cohort_status_string(cohort_status_t status);

/**
 * @brief The message of the last failed call on the calling thread.
 * @return "" if no call on this thread has failed. The text is owned by cohort and
 *   stays valid on this thread until the next failing cohort call on it.
 */
COHORT_API const char* cohort_last_error(void);

/** @brief The version of the loaded library as MAJOR*10000 + MINOR*100 + PATCH. */
COHORT_API unsigned cohort_version(void);

/** @brief The version of the loaded library as "MAJOR.MINOR.PATCH" (static text). */
COHORT_API const char* cohort_version_string(void);

/**
 * @brief Finalizes MPI for this process if cohort initialized it.
 *
 * Optional: cohort also finalizes at process exit, after shutting down any runtime the
 * program left alive (with a warning; that shutdown is the collective one of
 * cohort_runtime_destroy()). Call it on every rank, after every runtime has been
 * destroyed: while one is alive it returns ::COHORT_ERR_INVALID_STATE and finalizes
 * nothing. A program that initialized MPI itself destroys its runtimes before its own
 * MPI_Finalize(). Afterwards cohort_runtime_create() fails with ::COHORT_ERR_INVALID_STATE.
 * Calling it twice, or when MPI was initialized by the caller (who then finalizes it),
 * does nothing and returns ::COHORT_OK. Collective over all ranks (it calls
 * MPI_Finalize).
 */
COHORT_API cohort_status_t cohort_finalize(void);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_COMMON_H */
