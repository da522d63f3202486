#include "backend/math_policy.h"

#include "core/status.h"

namespace cohort::backend {

Tf32 parse_tf32(std::string_view value) {
  if (value == "auto") return Tf32::kAuto;
  if (value == "on") return Tf32::kOn;
  if (value == "off") return Tf32::kOff;
  fail(Code::kInvalidArgument, "tf32=", value, " is not a math policy; expected auto, on or off");
}

const char* tf32_name(Tf32 t) {
  switch (t) {
    case Tf32::kAuto:
      return "auto";
    case Tf32::kOn:
      return "on";
    case Tf32::kOff:
      return "off";
  }
  return "?";
}

bool tf32_enabled(Tf32 policy, int major, int) { return policy != Tf32::kOff && major >= 8; }

std::string describe_math(Tf32 policy, int major, int minor) {
  const std::string gpu = cat("sm_", major, minor);
  if (tf32_enabled(policy, major, minor))
    return cat("tf32=", tf32_name(policy), ": TF32 tensor cores for f32 convolutions and matrix products (", gpu, ")");
  if (policy == Tf32::kOff) return cat("tf32=off: f32 convolutions and matrix products in full f32 (", gpu, ")");
  return cat("tf32=", tf32_name(policy), ": full f32 (", gpu, " has no TF32 tensor cores)");
}

}  // namespace cohort::backend
