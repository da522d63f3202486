// What cohortrun reads from mpirun's stderr to name a failed rank or a lost host, from
// arbitrary bytes: a failure it reports names a rank or a host, and it never crashes or
// recurses deeply whatever the ranks print.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "failure.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto failure = cohortrun::find_rank_failure(std::string_view(reinterpret_cast<const char*>(data), size));
  if (failure && ((failure->rank < 0 && failure->node.empty()) || failure->reason.empty())) std::abort();
  return 0;
}
