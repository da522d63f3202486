#include "backend/cpu/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#  include <cpuid.h>
#endif

namespace cohort::backend::cpu {

bool cpu_has_avx512() {
#if defined(__x86_64__)
  static const bool yes =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
#else
  return false;
#endif
}

bool cpu_has_avx512_fp16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (d & (1u << 23)) != 0;
#else
  return false;
#endif
}

}  // namespace cohort::backend::cpu
