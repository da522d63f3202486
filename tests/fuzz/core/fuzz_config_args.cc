// Fuzzes the command-line and value parsers of the option registry: any byte string,
// split on NUL into argv, must either parse or throw cohort::Error — never crash,
// leak or hang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"prog"};
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(current);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  cohort::Config config;
  for (bool strict : {false, true}) {
    try {
      config.parse_args(static_cast<int>(argv.size()), argv.data(), strict);
      (void)config.get_int("batch_size");
      (void)config.get_string("precision");
    } catch (const cohort::Error&) {
    }
  }
  return 0;
}
