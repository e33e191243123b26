#include "topology/nvml.h"

#include <dlfcn.h>

#include <cctype>

#include "base/error.h"

namespace strata::topology {
namespace {

// The few NVML types used, as nvml.h defines them (the header is not needed to build).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr int kNvmlSuccess = 0, kNvmlEnabled = 1, kCapP2pSupported = 0, kP2pRead = 0, kP2pWrite = 1, kP2pOk = 0;

struct Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*cc)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*linkState)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*linkRemote)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*linkCap)(nvmlDevice_t, unsigned, int, unsigned*) = nullptr;
  nvmlReturn_t (*p2p)(nvmlDevice_t, nvmlDevice_t, int, int*) = nullptr;

  template <typename F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    return f != nullptr;
  }
  bool load(std::string* why) {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      *why = "NVML (libnvidia-ml.so.1) not found: no NVIDIA driver, so no GPUs";
      return false;
    }
    bool ok = sym(init, "nvmlInit_v2") && sym(shutdown, "nvmlShutdown") && sym(count, "nvmlDeviceGetCount_v2") &&
              sym(handle, "nvmlDeviceGetHandleByIndex_v2") && sym(pci, "nvmlDeviceGetPciInfo_v3") &&
              sym(cc, "nvmlDeviceGetCudaComputeCapability") && sym(linkState, "nvmlDeviceGetNvLinkState") &&
              sym(linkRemote, "nvmlDeviceGetNvLinkRemotePciInfo_v2") && sym(linkCap, "nvmlDeviceGetNvLinkCapability") &&
              sym(p2p, "nvmlDeviceGetP2PStatus");
    if (!ok) *why = "NVML is too old (a function Strata needs is missing)";
    return ok;
  }
};

}  // namespace

std::string normalizeBusId(const std::string& busId) {
  std::string s;
  for (char c : busId) s += static_cast<char>(tolower(static_cast<unsigned char>(c)));
  size_t colon = s.find(':');
  if (colon != std::string::npos && colon > 4) s = s.substr(colon - 4);
  return s;
}

std::vector<NvmlGpu> probeNvmlGpus(std::string* why) {
  std::vector<NvmlGpu> gpus;
  Nvml nv;
  if (!nv.load(why)) {
    if (nv.lib) dlclose(nv.lib);
    return gpus;
  }
  unsigned n = 0;
  if (nv.init() != kNvmlSuccess || nv.count(&n) != kNvmlSuccess) {
    *why = "NVML did not initialise (driver not loaded?)";
    dlclose(nv.lib);
    return gpus;
  }
  std::vector<nvmlDevice_t> handles(n);
  for (unsigned i = 0; i < n; ++i) {
    nvmlPciInfo_t info{};
    int major = 0, minor = 0;
    if (nv.handle(i, &handles[i]) != kNvmlSuccess || nv.pci(handles[i], &info) != kNvmlSuccess) continue;
    NvmlGpu g;
    g.index = static_cast<int>(i);
    g.busId = normalizeBusId(info.busId);
    if (nv.cc(handles[i], &major, &minor) == kNvmlSuccess) g.sm = major * 10 + minor;
    // NCCL's ladder of links to probe per generation; an A800/H800 shows fewer active ones.
    unsigned links = g.sm >= 90 ? 18 : g.sm >= 80 ? 12 : g.sm >= 70 ? 6 : g.sm >= 60 ? 4 : 0;
    for (unsigned l = 0; l < links; ++l) {
      unsigned cap = 0;
      int active = 0;
      nvmlPciInfo_t remote{};
      if (nv.linkCap(handles[i], l, kCapP2pSupported, &cap) != kNvmlSuccess || !cap) continue;
      if (nv.linkState(handles[i], l, &active) != kNvmlSuccess || active != kNvmlEnabled) continue;
      if (nv.linkRemote(handles[i], l, &remote) != kNvmlSuccess) continue;
      std::string target = normalizeBusId(remote.busId);
      bool found = false;
      for (auto& [t, count] : g.nvlinks)
        if (t == target) {
          ++count;
          found = true;
        }
      if (!found) g.nvlinks.emplace_back(target, 1);
    }
    gpus.push_back(std::move(g));
  }
  for (size_t a = 0; a < gpus.size(); ++a)
    for (size_t b = 0; b < gpus.size(); ++b) {
      int rd = 1, wr = 1;
      if (a == b) continue;
      nvmlDevice_t ha = handles[gpus[a].index], hb = handles[gpus[b].index];
      if (nv.p2p(ha, hb, kP2pRead, &rd) != kNvmlSuccess || nv.p2p(ha, hb, kP2pWrite, &wr) != kNvmlSuccess) continue;
      if (rd != kP2pOk || wr != kP2pOk) gpus[a].noP2p.push_back(gpus[b].busId);
    }
  nv.shutdown();
  dlclose(nv.lib);
  if (gpus.empty()) *why = "NVML reports no GPUs";
  return gpus;
}

}  // namespace strata::topology
