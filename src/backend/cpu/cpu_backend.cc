// The oneDNN CPU backend (its plan: backend/cpu/plan.h) and what the CPU offers it.
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/plan.h"

#include <atomic>

#include "core/logging.h"

namespace cohort::backend {
namespace {

// A precision that trains here but slower than f32 is said once per process.
void warn_once_if_slow(Precision p, const CpuIsa& isa) {
  static std::atomic<bool> warned{false};
  const std::string warning = cpu_precision_warning(p, isa);
  if (!warning.empty() && !warned.exchange(true)) COHORT_LOG_WARN(warning);
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) {}
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::cpu(); }
  Stream stream() const override { return Stream::host(threads_ > 0 ? threads_ : omp_get_max_threads()); }
  std::unique_ptr<Plan> compile(const NetSpec& spec, const Bindings& bindings, const PlanOptions& options) override {
    require(options.batch > 0, "batch size must be positive, got ", options.batch);
    check_bindings(spec, bindings, device());
    const CpuIsa isa = probe_cpu_isa();
    check_cpu_precision(options.precision, isa);
    warn_once_if_slow(options.precision, isa);
    return std::make_unique<cpu::CpuPlan>(spec, bindings, options, threads_);
  }

 private:
  int threads_;
};

}  // namespace

std::shared_ptr<Backend> make_cpu_backend(int threads) { return std::make_shared<CpuBackend>(threads); }

CpuIsa probe_cpu_isa() {
  CpuIsa isa;
  const auto v = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [v](dnnl_cpu_isa_t i) { return (v & static_cast<unsigned>(i)) == static_cast<unsigned>(i); };
  isa.bf16 = dnnlc::effective_isa_has_bf16();
  isa.amx = has(dnnl_cpu_isa_avx512_core_amx);
  isa.fp16 = cpu::cpu_has_avx512_fp16();
  if (isa.amx)
    isa.name = "avx512_core_amx";
  else if (isa.bf16)
    isa.name = "avx512_core_bf16";
  else if (has(dnnl_cpu_isa_avx512_core_vnni))
    isa.name = "avx512_core_vnni";
  else if (has(dnnl_cpu_isa_avx512_core))
    isa.name = "avx512_core";
  else if (has(dnnl_cpu_isa_avx2))
    isa.name = "avx2";
  else
    isa.name = cat("oneDNN cpu_isa 0x", std::hex, v);
  return isa;
}

}  // namespace cohort::backend
