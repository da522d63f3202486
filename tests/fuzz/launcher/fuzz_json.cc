// The JSON reader cohortrun uses for run summaries, from arbitrary bytes: it parses or
// throws std::runtime_error, never crashes or recurses without bound; strings it reads
// quote back to text it reads as the same string.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "json.h"

namespace {

void walk(const cohortrun::Json& j) {
  if (const auto* s = std::get_if<std::string>(&j.value)) {
    const cohortrun::Json back = cohortrun::parse_json(cohortrun::json_quote(*s));
    if (!std::holds_alternative<std::string>(back.value) || std::get<std::string>(back.value) != *s) std::abort();
  } else if (const auto* a = std::get_if<std::shared_ptr<cohortrun::Json::Array>>(&j.value)) {
    for (const cohortrun::Json& e : **a) walk(e);
  } else if (const auto* o = std::get_if<std::shared_ptr<cohortrun::Json::Object>>(&j.value)) {
    for (const auto& [key, e] : **o) walk(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    walk(cohortrun::parse_json(std::string_view(reinterpret_cast<const char*>(data), size)));
  } catch (const std::runtime_error&) {
  }
  return 0;
}
