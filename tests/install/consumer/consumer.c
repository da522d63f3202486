/* A program outside the source tree, built against an installed cohort. */
#include <stdio.h>
#include <string.h>

#include <cohort/cohort.h>

int main(void) {
  cohort_runtime_t* rt = NULL;
  int size = 0;
  if (strcmp(cohort_version_string(), COHORT_VERSION_STRING) != 0) {
    fprintf(stderr, "header %s but library %s\n", COHORT_VERSION_STRING, cohort_version_string());
    return 1;
  }
  if (cohort_runtime_create(NULL, &rt) != COHORT_OK || cohort_runtime_size(rt, &size) != COHORT_OK) {
    fprintf(stderr, "%s\n", cohort_last_error());
    return 1;
  }
  printf("consumer: cohort %s, %d rank\n", cohort_version_string(), size);
  cohort_runtime_destroy(rt);
  return size == 1 ? 0 : 1;
}
