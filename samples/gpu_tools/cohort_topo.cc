// cohort-topo: the machine as a data-parallel job sees it: sockets, NUMA nodes and cores
// (hwloc, with or without a GPU); the GPUs the CUDA runtime sees, the NUMA node and CPUs
// near each, its PCIe link and NVLinks (NVML, loaded with dlopen); and for each pair of
// GPUs, whether CUDA allows peer access and what connects them. What it cannot report
// where it runs (no GPU, no NVML) it names, with the reason.
//
//   cohort-topo
//
// Exit status: 0 when it reported the CPU topology (GPUs or not); 1 when hwloc failed;
// 2 for a bad flag.
#include <hwloc.h>
#include <hwloc/cudart.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gpu_common.h"
#include "nvml_loader.h"

namespace {

using gpu_tools::Nvml;
using gpu_tools::nvmlDevice_t;

std::string plural(int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

// "0-15,32-47" for a set of CPUs (hwloc's processing units, by OS index).
std::string cpu_list(hwloc_const_bitmap_t set) {
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set) < 0 || !text) return "?";
  std::string s = text;
  std::free(text);
  return s;
}

// NUMA nodes whose CPUs intersect `set`, as "0" or "0, 1".
std::string numa_nodes_of(hwloc_topology_t topo, hwloc_const_bitmap_t set) {
  std::string out;
  for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n));)
    if (n->cpuset && hwloc_bitmap_intersects(n->cpuset, set))
      out += (out.empty() ? "" : ", ") + std::to_string(n->os_index);
  return out.empty() ? "?" : out;
}

int cores_in(hwloc_topology_t topo, hwloc_const_bitmap_t set) {
  return hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE);
}

void print_cpus(hwloc_topology_t topo) {
  const int sockets = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  const int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  const int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  const int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  std::printf("CPU (hwloc): %s, %s, %s, %s\n", plural(sockets, "socket", "sockets").c_str(),
              plural(numa, "NUMA node", "NUMA nodes").c_str(), plural(cores, "core", "cores").c_str(),
              plural(pus, "hardware thread", "hardware threads").c_str());
  for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, p));) {
    const char* model = hwloc_obj_get_info_by_name(p, "CPUModel");
    std::printf("  socket %u: %s, %s (CPUs %s), NUMA node %s\n", p->os_index, model ? model : "unknown model",
                plural(cores_in(topo, p->cpuset), "core", "cores").c_str(), cpu_list(p->cpuset).c_str(),
                numa_nodes_of(topo, p->cpuset).c_str());
  }
  for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n));)
    std::printf("  NUMA node %u: %.1f GiB, %s (CPUs %s)\n", n->os_index,
                static_cast<double>(n->attr->numanode.local_memory) / (1ull << 30),
                plural(cores_in(topo, n->cpuset), "core", "cores").c_str(), cpu_list(n->cpuset).c_str());
}

// PCI address as one number, so "0000:17:00.0" (CUDA) and "00000000:17:00.0" (NVML) match.
unsigned long long pci_key(const std::string& bus_id) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return ~0ull;
  return (static_cast<unsigned long long>(domain) << 24) | (bus << 16) | (dev << 8) | fn;
}

struct Gpu {
  int index = 0;
  std::string bus_id;
  nvmlDevice_t nvml = nullptr;
  std::vector<unsigned long long> nvlink_peers;  // PCI address at the far end of each active NVLink
};

std::string pcie_line(const Nvml& nvml, nvmlDevice_t dev) {
  unsigned gen = 0, width = 0, gen_now = 0, width_now = 0;
  if (!nvml.pcie_gen_max || !nvml.pcie_width_max || nvml.pcie_gen_max(dev, &gen) != gpu_tools::kNvmlSuccess ||
      nvml.pcie_width_max(dev, &width) != gpu_tools::kNvmlSuccess)
    return "not reported by NVML";
  std::string s = "Gen" + std::to_string(gen) + " x" + std::to_string(width);
  if (nvml.pcie_gen_now && nvml.pcie_width_now && nvml.pcie_gen_now(dev, &gen_now) == gpu_tools::kNvmlSuccess &&
      nvml.pcie_width_now(dev, &width_now) == gpu_tools::kNvmlSuccess)
    s += " (running at Gen" + std::to_string(gen_now) + " x" + std::to_string(width_now) +
         "; an idle GPU lowers its link speed)";
  return s;
}

std::string nvlink_line(const Nvml& nvml, Gpu& g) {
  if (!nvml.nvlink_state) return "not reported by this NVML";
  int active = 0;
  for (unsigned link = 0; link < 64; ++link) {
    int state = 0;
    gpu_tools::nvmlReturn_t rc = nvml.nvlink_state(g.nvml, link, &state);
    if (rc == gpu_tools::kNvmlInvalidArgument) break;  // past the last link
    if (rc != gpu_tools::kNvmlSuccess) {
      if (link == 0) return "none (" + nvml.error(rc) + ")";
      break;
    }
    if (state != gpu_tools::kNvmlFeatureEnabled) continue;
    ++active;
    gpu_tools::NvmlPciInfo remote{};
    if (nvml.nvlink_remote_pci && nvml.nvlink_remote_pci(g.nvml, link, &remote) == gpu_tools::kNvmlSuccess) {
      remote.busId[sizeof remote.busId - 1] = '\0';
      g.nvlink_peers.push_back(pci_key(remote.busId));
    }
  }
  if (active == 0) return "none active";
  return plural(active, "link", "links") + " active";
}

std::string path_name(int level) {
  switch (level) {
    case gpu_tools::kTopoInternal:
      return "on one board";
    case gpu_tools::kTopoSingle:
      return "PCIe through one switch (PIX)";
    case gpu_tools::kTopoMultiple:
      return "PCIe through several switches (PXB)";
    case gpu_tools::kTopoHostBridge:
      return "PCIe through the host bridge (PHB)";
    case gpu_tools::kTopoNode:
      return "PCIe between host bridges of one NUMA node (NODE)";
    case gpu_tools::kTopoSystem:
      return "PCIe and the link between NUMA nodes (SYS)";
    default:
      return "PCIe (level " + std::to_string(level) + ")";
  }
}

// What connects two GPUs: NVLink (counting direct links), else their PCIe path.
std::string link_between(const Nvml& nvml, const Gpu& a, const Gpu& b) {
  if (!nvml.ok()) return "link not reported (NVML " + nvml.why() + ")";
  if (!a.nvml || !b.nvml) return "link not reported (NVML does not know one of them)";
  int direct = 0;
  for (unsigned long long peer : a.nvlink_peers) direct += peer == pci_key(b.bus_id);
  if (direct > 0) return "NVLink, " + plural(direct, "link", "links");
  int status = -1;
  if (nvml.p2p_status &&
      nvml.p2p_status(a.nvml, b.nvml, gpu_tools::kNvmlP2PCapsNvlink, &status) == gpu_tools::kNvmlSuccess &&
      status == gpu_tools::kNvmlP2PStatusOk)
    return "NVLink through NVSwitch";
  int level = -1;
  if (nvml.common_ancestor && nvml.common_ancestor(a.nvml, b.nvml, &level) == gpu_tools::kNvmlSuccess)
    return path_name(level);
  return "link not reported by NVML";
}

void print_gpus(hwloc_topology_t topo, const Nvml& nvml) {
  std::string why;
  const int count = gpu_tools::visible_gpus(&why);
  if (count == 0) {
    std::printf("GPUs: none (%s)\n", why.c_str());
    std::printf(
        "not reported: GPUs, the NUMA node near each, their PCIe links and NVLinks, peer access between "
        "them: they need a GPU\n");
    return;
  }
  std::printf("GPUs (CUDA): %d\n", count);
  std::vector<Gpu> gpus(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d) {
    Gpu& g = gpus[static_cast<size_t>(d)];
    g.index = d;
    std::printf("  GPU %d: %s\n", d, gpu_tools::describe_gpu(d, &g.bus_id).c_str());
    hwloc_bitmap_t near = hwloc_bitmap_alloc();
    if (near && hwloc_cudart_get_device_cpuset(topo, d, near) == 0)
      std::printf("    near: NUMA node %s (CPUs %s)\n", numa_nodes_of(topo, near).c_str(), cpu_list(near).c_str());
    else
      std::printf("    near: not reported (hwloc could not read the GPU's local CPUs from sysfs)\n");
    hwloc_bitmap_free(near);
    if (!nvml.ok()) continue;
    if (!nvml.handle_by_bus_id || nvml.handle_by_bus_id(g.bus_id.c_str(), &g.nvml) != gpu_tools::kNvmlSuccess) {
      g.nvml = nullptr;
      std::printf("    PCIe, NVLink: not reported (NVML has no GPU at PCI %s)\n", g.bus_id.c_str());
      continue;
    }
    std::printf("    PCIe: %s\n", pcie_line(nvml, g.nvml).c_str());
    std::printf("    NVLink: %s\n", nvlink_line(nvml, g).c_str());
  }
  if (count == 1) {
    std::printf("GPU pairs: none: one GPU (peer access and links between GPUs need two)\n");
    return;
  }
  std::printf("GPU pairs:\n");
  for (int i = 0; i < count; ++i)
    for (int j = i + 1; j < count; ++j) {
      int ij = 0, ji = 0;
      if (cudaDeviceCanAccessPeer(&ij, i, j) != cudaSuccess || cudaDeviceCanAccessPeer(&ji, j, i) != cudaSuccess)
        cudaGetLastError();
      std::printf("  GPU %d - GPU %d: peer access %d->%d %s, %d->%d %s; %s\n", i, j, i, j, ij ? "yes" : "no", j, i,
                  ji ? "yes" : "no",
                  link_between(nvml, gpus[static_cast<size_t>(i)], gpus[static_cast<size_t>(j)]).c_str());
    }
}

void print_nvml(const Nvml& nvml) {
  if (!nvml.ok()) {
    std::printf("NVML: %s: PCIe links and NVLinks not reported\n", nvml.why().c_str());
    return;
  }
  char driver[96] = "?";
  if (!nvml.driver_version || nvml.driver_version(driver, sizeof driver) != gpu_tools::kNvmlSuccess)
    std::snprintf(driver, sizeof driver, "?");
  unsigned n = 0;
  std::string count = nvml.device_count && nvml.device_count(&n) == gpu_tools::kNvmlSuccess
                          ? plural(static_cast<int>(n), "GPU", "GPUs") +
                                " (all of the machine's, whatever "
                                "CUDA_VISIBLE_DEVICES says)"
                          : "GPU count not reported";
  std::printf("NVML: driver %s, %s\n", driver, count.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "-h" || f == "--help") {
      std::printf(
          "usage: cohort-topo\n"
          "Prints the CPU topology (sockets, NUMA nodes, cores; from hwloc), the GPUs the CUDA\n"
          "runtime sees with the NUMA node near each, their PCIe links and NVLinks (from NVML,\n"
          "loaded at run time), and for each pair of GPUs peer access and what connects them.\n"
          "What it cannot report where it runs is named with the reason.\n"
          "Exit status: 0 when the CPU topology was reported (GPUs or not); 1 when hwloc failed;\n"
          "2 for a bad flag.\n");
      return 0;
    }
    std::fprintf(stderr, "cohort-topo: unknown argument '%s' (see --help)\n", argv[i]);
    return 2;
  }
  std::printf("# cohort-topo: %s\n", gpu_tools::versions().c_str());
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
    std::fprintf(stderr, "cohort-topo: hwloc could not read this machine's topology (hwloc_topology_load failed)\n");
    if (topo) hwloc_topology_destroy(topo);
    return 1;
  }
  print_cpus(topo);
  {
    Nvml nvml;
    print_gpus(topo, nvml);
    print_nvml(nvml);
  }
  hwloc_topology_destroy(topo);
  return 0;
}
