// Host lists (-H) and Open MPI hostfiles from arbitrary bytes: each parses or throws
// UsageError, never crashes; what parses has valid names and positive slot counts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "hosts.h"
#include "text.h"

namespace {

void check(const std::vector<cohortrun::Host>& hosts) {
  if (hosts.empty()) std::abort();
  for (const cohortrun::Host& h : hosts)
    if (h.name.empty() || h.slots < 1 || h.name.find_first_of(" ,:;$`'\"\n") != std::string::npos) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check(cohortrun::parse_host_list(text));
  } catch (const cohortrun::UsageError&) {
  }
  try {
    check(cohortrun::parse_hostfile_text(text, "fuzz-hostfile"));
  } catch (const cohortrun::UsageError&) {
  }
  return 0;
}
