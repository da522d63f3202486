// The oneDNN CPU backend (its plan: backend/cpu/plan.h) and what the CPU offers it.
#include "backend/cpu/plan.h"

namespace cohort::backend {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) {}
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::cpu(); }
  Stream stream() const override { return Stream::host(threads_ > 0 ? threads_ : omp_get_max_threads()); }
  std::unique_ptr<Plan> compile(const NetSpec& spec, const Bindings& bindings, const PlanOptions& options) override {
    require(options.batch > 0, "batch size must be positive, got ", options.batch);
    check_bindings(spec, bindings, device());
    check_cpu_precision(options.precision, probe_cpu_isa());
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
