/**
 * @file cohort.h
 * @brief The whole public C API of cohort. Compiles as C99 and as C++.
 *
 * A program links libcohort, creates a runtime (cohort_runtime_create()), and runs the
 * same code on one process or on N ranks started by `cohortrun`.
 */
#ifndef COHORT_COHORT_H
#define COHORT_COHORT_H

#include "cohort/common.h"
#include "cohort/config.h"
#include "cohort/build.h"
#include "cohort/runtime.h"
#include "cohort/collectives.h"
#include "cohort/data.h"
#include "cohort/pipeline.h"
#include "cohort/model.h"
#include "cohort/train.h"

#endif /* COHORT_COHORT_H */
