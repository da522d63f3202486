/**
 * @file build.h
 * @brief What this build of cohort can do: the libraries it was built with and the
 *        GPUs the process sees (what `cohortrun --check-build` prints).
 *
 * None of these calls initializes MPI or creates a runtime: the MPI library is asked
 * through MPI_Get_version() and MPI_Get_library_version(), which MPI allows before
 * MPI_Init. The answer is computed once per process, on the first call; afterwards
 * the calls are cheap and thread-safe. The CUDA part (runtime, driver, GPUs) is asked
 * of the CUDA runtime when the CUDA backend is built; without it the versions are "".
 */
#ifndef COHORT_BUILD_H
#define COHORT_BUILD_H

#include "cohort/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief The libraries of this build, filled by cohort_build_info().
 *
 * Every string has static storage: it is owned by cohort, valid until the process
 * exits, and never NULL ("" means "not built" or "not known").
 */
typedef struct cohort_build_info_t {
  size_t struct_size;           /**< Set by the caller to sizeof(cohort_build_info_t). */
  const char* cohort_version;   /**< This library's version, "MAJOR.MINOR.PATCH". */
  const char* mpi_library;      /**< First line of MPI_Get_library_version(), e.g. "Open MPI v4.1.4, …". */
  int mpi_version;              /**< MPI standard version (MPI_Get_version), e.g. 3. */
  int mpi_subversion;           /**< MPI standard subversion, e.g. 1. */
  int cuda_built;               /**< 1 when the CUDA backend (CUDA, cuDNN, NCCL) is compiled in, else 0. */
  const char* cuda_runtime;     /**< CUDA runtime version, e.g. "13.0"; "" without the CUDA backend. */
  const char* cuda_driver;      /**< Version the installed driver supports, e.g. "13.0"; "" without a driver. */
  const char* cudnn;            /**< cuDNN version loaded, e.g. "9.19.0"; "" without the CUDA backend. */
  const char* nccl;             /**< NCCL version loaded, e.g. "2.28.3"; "" without the CUDA backend. */
  const char* dnnl;             /**< oneDNN version loaded, e.g. "2.6.3". */
  const char* dnnl_cpu_runtime; /**< oneDNN's CPU threading runtime: "OpenMP", "TBB", "threadpool", "sequential". */
  const char* jpeg_turbo;       /**< libjpeg-turbo version cohort was compiled against, e.g. "2.1.5". */
  int gpu_count;                /**< GPUs this process sees (0 without GPU, driver or CUDA backend). */
  const char* gpu_note;         /**< Why gpu_count is 0 (e.g. the CUDA error), else "". */
  int cuda_trains;              /**< 1 when models can compute on a GPU (a build with the CUDA backend),
                                     else 0: models compute on the CPU. */
} cohort_build_info_t;

/**
 * @brief Describes one GPU this process sees, filled by cohort_build_gpu_info().
 *
 * Strings have static storage (owned by cohort, valid until the process exits).
 */
typedef struct cohort_gpu_info_t {
  size_t struct_size;     /**< Set by the caller to sizeof(cohort_gpu_info_t). */
  const char* name;       /**< Device name, e.g. "NVIDIA H100 80GB HBM3". */
  const char* pci_bus_id; /**< PCI bus id, e.g. "0000:17:00.0". */
  uint64_t total_memory;  /**< Device memory in bytes. */
  int compute_major;      /**< Compute capability, major part (9 for sm_90). */
  int compute_minor;      /**< Compute capability, minor part. */
  int multiprocessors;    /**< Number of streaming multiprocessors. */
} cohort_gpu_info_t;

/**
 * @brief Fills @p info with the versions of this build's libraries and the GPU count.
 * @param[in,out] info Caller-owned; set info->struct_size = sizeof(*info) first. The
 *   strings it receives are borrowed from cohort (static storage).
 * @return ::COHORT_OK, or ::COHORT_ERR_INVALID_ARGUMENT if @p info is NULL or its
 *   struct_size is wrong. Thread-safe; not collective; does not initialize MPI.
 */
COHORT_API cohort_status_t cohort_build_info(cohort_build_info_t* info);

/**
 * @brief Describes GPU number @p index (0 ≤ index < cohort_build_info_t::gpu_count).
 * @param index CUDA device ordinal as this process sees it (after CUDA_VISIBLE_DEVICES).
 * @param[in,out] info Caller-owned; set info->struct_size = sizeof(*info) first.
 * @return ::COHORT_OK; ::COHORT_ERR_INVALID_ARGUMENT for a NULL @p info, a wrong
 *   struct_size or an index out of range (the message says how many GPUs there are).
 *   Thread-safe; not collective.
 */
COHORT_API cohort_status_t cohort_build_gpu_info(int index, cohort_gpu_info_t* info);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_BUILD_H */
