/* cohort-options: prints the option reference (Markdown with --markdown, else the
 * --help text of every option, or of one group: cohort-options data). */
#include <stdio.h>
#include <string.h>

#include <cohort/cohort.h>

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--markdown") == 0) {
    fputs(cohort_option_markdown(), stdout);
    return 0;
  }
  const char* text = cohort_option_help(argc > 1 ? argv[1] : NULL);
  if (!*text) {
    fprintf(stderr, "cohort-options: unknown group '%s' (core, comm, compute, data, train, launcher)\n", argv[1]);
    return 2;
  }
  fputs(text, stdout);
  return 0;
}
