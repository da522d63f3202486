/**
 * @file data.h
 * @brief The dataset tools: pack an image folder into TFRecord shards, inspect a
 *        source, verify every record and image of one (what `cohort-data` runs).
 *
 * None of these calls is collective or needs a runtime.
 */
#ifndef COHORT_DATA_H
#define COHORT_DATA_H

#include <stdint.h>

#include "cohort/common.h"
#include "cohort/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Receives one line of output of the dataset tools.
 * @param line NUL-terminated text without a newline, valid during the call.
 * @param user The pointer given to the tool function.
 */
typedef void (*cohort_data_report_fn)(const char* line, void* user);

/**
 * @brief Packs an image folder (one sub-folder per class, sorted → labels from 0)
 *        into TFRecord shards `<data_split>-NNNNN-of-NNNNN` with DALI-format `.idx` files.
 *        Bad images are reported through `report` and skipped.
 * @param config Options (NULL = defaults; `data_split`, `label_offset`, `max_image_pixels` apply).
 * @param image_dir The folder to pack.
 * @param out_dir Created when missing.
 * @param shards Number of shards, >= 1.
 * @param report Called for each skipped image and a final summary line (may be NULL).
 * @param user Passed to report.
 * @param[out] written Receives the number of records written (may be NULL).
 */
COHORT_API cohort_status_t cohort_data_pack(const cohort_config_t* config, const char* image_dir, const char* out_dir,
                                            int shards, cohort_data_report_fn report, void* user, int64_t* written);

/**
 * @brief Describes any supported source: kind, sample count, classes, and the first
 *        `limit` samples with labels and image sizes, one line per call of `report`.
 * @param config Options (NULL = defaults; `data_source`, `data_split` apply).
 * @param path The dataset path.
 * @param limit Samples to list.
 * @param report Receives the lines (required).
 * @param user Passed to report.
 */
COHORT_API cohort_status_t cohort_data_inspect(const cohort_config_t* config, const char* path, int64_t limit,
                                               cohort_data_report_fn report, void* user);

/**
 * @brief Checks every CRC and record, and every DALI index against its shard, and
 *        decodes every image fully (to its end marker) of a source, reporting each
 *        broken one (file and offset or record), libjpeg's warnings about images that
 *        decode ("WARNING ..."), and a summary.
 * @param config Options (NULL = defaults).
 * @param path The dataset path.
 * @param report Receives the lines (may be NULL).
 * @param user Passed to report.
 * @param[out] broken Receives the number of broken samples (may be NULL).
 */
COHORT_API cohort_status_t cohort_data_verify(const cohort_config_t* config, const char* path,
                                              cohort_data_report_fn report, void* user, int64_t* broken);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_DATA_H */
