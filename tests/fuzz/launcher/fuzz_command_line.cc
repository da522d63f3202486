// cohortrun's command line from arbitrary bytes (split on NUL into arguments): it parses
// or throws UsageError, never crashes; and the shell quoting of --dry-run reads back,
// through --mpi-args' word splitter, as exactly the same arguments.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "command_line.h"
#include "text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0)
      args.emplace_back();
    else
      args.back().push_back(static_cast<char>(data[i]));
  }
  try {
    (void)cohortrun::parse_command_line(args);
  } catch (const cohortrun::UsageError&) {
  }
  try {
    (void)cohortrun::split_words(args[0], "--mpi-args");
  } catch (const cohortrun::UsageError&) {
  }
  if (cohortrun::split_words(cohortrun::shell_join(args), "a quoted line") != args) std::abort();
  return 0;
}
