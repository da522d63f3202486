// NVML, the NVIDIA driver's management library, loaded at run time with dlopen: no NVML
// header or link library is packaged with the CUDA toolkit here, and a machine without
// the driver has no libnvidia-ml.so.1 at all. The declarations below are the few NVML
// entry points cohort-topo calls, with the types and values of NVIDIA's nvml.h.
#pragma once

#include <dlfcn.h>

#include <string>

namespace gpu_tools {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlInvalidArgument = 2;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

// nvmlPciInfo_t, with room to spare should a driver write more than the layout below.
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
  char spare[256];
};

// nvmlGpuTopologyLevel_t
enum NvmlTopologyLevel : int {
  kTopoInternal = 0,
  kTopoSingle = 10,
  kTopoMultiple = 20,
  kTopoHostBridge = 30,
  kTopoNode = 40,
  kTopoSystem = 50
};
constexpr int kNvmlP2PCapsNvlink = 2;   // NVML_P2P_CAPS_INDEX_NVLINK
constexpr int kNvmlP2PStatusOk = 0;     // NVML_P2P_STATUS_OK
constexpr int kNvmlFeatureEnabled = 1;  // NVML_FEATURE_ENABLED

class Nvml {
 public:
  // Loads the library and calls nvmlInit_v2; ok() says whether it worked, why() why not.
  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      const char* e = dlerror();
      why_ = std::string("not loaded (") + (e ? e : "dlopen failed") + "; NVML comes with the NVIDIA driver)";
      return;
    }
    init_ = sym<nvmlReturn_t (*)()>("nvmlInit_v2");
    shutdown_ = sym<nvmlReturn_t (*)()>("nvmlShutdown");
    error_string_ = sym<const char* (*)(nvmlReturn_t)>("nvmlErrorString");
    if (!init_ || !shutdown_ || !error_string_) {
      why_ = "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlShutdown or nvmlErrorString (a driver older than r325?)";
      return;
    }
    if (nvmlReturn_t rc = init_(); rc != kNvmlSuccess) {
      why_ = std::string("nvmlInit_v2 failed: ") + error_string_(rc);
      return;
    }
    ok_ = true;
    driver_version = sym<nvmlReturn_t (*)(char*, unsigned)>("nvmlSystemGetDriverVersion");
    device_count = sym<nvmlReturn_t (*)(unsigned*)>("nvmlDeviceGetCount_v2");
    handle_by_bus_id = sym<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>("nvmlDeviceGetHandleByPciBusId_v2");
    pcie_gen_max = sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetMaxPcieLinkGeneration");
    pcie_width_max = sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetMaxPcieLinkWidth");
    pcie_gen_now = sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetCurrPcieLinkGeneration");
    pcie_width_now = sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetCurrPcieLinkWidth");
    nvlink_state = sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned, int*)>("nvmlDeviceGetNvLinkState");
    nvlink_remote_pci =
        sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned, NvmlPciInfo*)>("nvmlDeviceGetNvLinkRemotePciInfo_v2");
    common_ancestor = sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t, int*)>("nvmlDeviceGetTopologyCommonAncestor");
    p2p_status = sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t, int, int*)>("nvmlDeviceGetP2PStatus");
  }
  ~Nvml() {
    if (ok_) shutdown_();
    if (lib_) dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string error(nvmlReturn_t rc) const { return error_string_ ? error_string_(rc) : "NVML error"; }

  // Entry points; null when this driver's NVML lacks one.
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*device_count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_by_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*pcie_gen_max)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*pcie_width_max)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*pcie_gen_now)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*pcie_width_now)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*nvlink_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*nvlink_remote_pci)(nvmlDevice_t, unsigned, NvmlPciInfo*) = nullptr;
  nvmlReturn_t (*common_ancestor)(nvmlDevice_t, nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*p2p_status)(nvmlDevice_t, nvmlDevice_t, int, int*) = nullptr;

 private:
  template <typename Fn>
  Fn sym(const char* name) {
    return reinterpret_cast<Fn>(dlsym(lib_, name));
  }
  void* lib_ = nullptr;
  bool ok_ = false;
  std::string why_;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
};

}  // namespace gpu_tools
