#include "train/precision.h"

#include <string>

#include "core/status.h"

namespace cohort::train {

void check_precision(const Config& config) {
  const std::string p = config.get_string("precision");
  if (p == "f32") return;
  fail(Code::kUnsupported, "precision=", p, " cannot run here: the CPU backend trains in f32 only (",
       p == "bf16" ? "this CPU has no avx512_bf16; " : "",
       "f16/bf16 training needs a CUDA GPU with the cuda device); use --precision=f32");
}

}  // namespace cohort::train
