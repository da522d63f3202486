#include "train/precision.h"

#include "backend/precision.h"

namespace cohort::train {

void check_precision(const Config& config) {
  backend::check_cpu_precision(backend::parse_precision(config.get_string("precision")), backend::probe_cpu_isa());
}

}  // namespace cohort::train
