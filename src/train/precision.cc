#include "train/precision.h"

#include "backend/precision.h"

namespace cohort::train {

void check_precision(const Config& config, Device device) {
  const backend::Precision p = backend::parse_precision(config.get_string("precision"));
  if (device.kind == Device::Kind::kCuda) return;
  backend::check_cpu_precision(p, backend::probe_cpu_isa());
}

}  // namespace cohort::train
