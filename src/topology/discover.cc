#include "topology/discover.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/config.h"
#include "base/error.h"
#include "topology/nvml.h"

namespace strata::topology {
namespace {

XmlElement* findPci(XmlElement& e, const std::string& busid) {
  for (XmlElement& c : e.children) {
    if (c.name == "pci" && c.attrOr("busid", "") == busid) return &c;
    if (XmlElement* f = findPci(c, busid)) return f;
  }
  return nullptr;
}

bool isBareGpu(const XmlElement& e) {
  std::string cls = e.attrOr("class", "");
  return e.name == "pci" && e.attrOr("vendor", "") == "0x10de" && cls.rfind("0x03", 0) == 0 && e.children.empty();
}

// GPUs hwloc saw on PCI but NVML did not describe: dropped, with a warning each.
void dropBareGpus(XmlElement& e, std::vector<std::string>* warnings, const std::string& why) {
  for (XmlElement& c : e.children) dropBareGpus(c, warnings, why);
  auto bare = [&](const XmlElement& c) {
    if (!isBareGpu(c)) return false;
    warnings->push_back(format("GPU %s is on PCI but not described (%s); left out", c.attrOr("busid", "?").c_str(), why.c_str()));
    return true;
  };
  e.children.erase(std::remove_if(e.children.begin(), e.children.end(), bare), e.children.end());
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

void attachGpus(XmlElement& root, const std::vector<NvmlGpu>& gpus, std::vector<std::string>* warnings) {
  // GPUDirect RDMA needs the peer-memory module.
  bool gdr = exists("/sys/module/nvidia_peermem") || exists("/sys/kernel/mm/memory_peers/nv_mem/version");
  for (const NvmlGpu& g : gpus) {
    XmlElement* pci = findPci(root, g.busId);
    if (!pci) {
      warnings->push_back(format("GPU %s (NVML %d) is not on hwloc's PCI tree; placed under NUMA 0", g.busId.c_str(), g.index));
      pci = &root.children.front().add("pci");
      pci->set("busid", g.busId);
      pci->set("class", "0x030200");
      pci->set("vendor", "0x10de");
    }
    XmlElement& gpu = pci->add("gpu");
    gpu.set("dev", std::to_string(g.index));
    gpu.set("sm", std::to_string(g.sm));
    gpu.set("gdr", gdr ? "1" : "0");
    if (!g.noP2p.empty()) gpu.set("p2p", "0");
    for (const auto& [target, count] : g.nvlinks) {
      bool toGpu = std::any_of(gpus.begin(), gpus.end(), [&, t = target](const NvmlGpu& o) { return o.busId == t; });
      XmlElement& l = gpu.add("nvlink");
      l.set("target", target);
      l.set("count", std::to_string(count));
      l.set("tclass", toGpu ? "0x030200" : "0x068000");
    }
  }
}

// "07:00.0" and "0000:07:00.0" alike, lower case: how GPUs are named (device::gpuBusId).
std::string canonicalBusId(const std::string& busid) {
  std::string s = normalizeBusId(busid);
  return std::count(s.begin(), s.end(), ':') == 1 ? "0000:" + s : s;
}

const XmlElement* childNamed(const XmlElement& e, const char* name) {
  for (const XmlElement& c : e.children)
    if (c.name == name) return &c;
  return nullptr;
}

// Discovered <pci> elements that carry a <gpu> or a <nic>, by canonical bus id.
void describedDevices(const XmlElement& e, std::map<std::string, const XmlElement*>* out) {
  for (const XmlElement& c : e.children) {
    if (c.name == "pci" && (childNamed(c, "gpu") || childNamed(c, "nic"))) (*out)[canonicalBusId(c.attrOr("busid", ""))] = &c;
    describedDevices(c, out);
  }
}

// Fills the file's bare <pci> elements from discovery; `used` collects the bus ids merged.
void fillBare(XmlElement& e, const std::map<std::string, const XmlElement*>& found, std::set<std::string>* used) {
  for (XmlElement& c : e.children) {
    fillBare(c, found, used);
    if (c.name != "pci") continue;
    auto it = found.find(canonicalBusId(c.attrOr("busid", "")));
    if (it == found.end()) continue;
    for (const char* kind : {"gpu", "nic"}) {
      const XmlElement* d = childNamed(*it->second, kind);
      if (!d || childNamed(c, kind)) continue;
      c.set("busid", it->first);  // GPUs are matched to ranks, and NVLinks to peers, by the canonical id
      c.children.push_back(*d);
      used->insert(it->first);
    }
  }
}

// NVLinks to GPUs the merged file does not have would read as links to an NVSwitch.
void dropDanglingNvlinks(XmlElement& e, const std::set<std::string>& gpus) {
  for (XmlElement& c : e.children) {
    if (c.name == "gpu")
      c.children.erase(std::remove_if(c.children.begin(), c.children.end(),
                                      [&](const XmlElement& l) {
                                        return l.name == "nvlink" && l.attrOr("tclass", "") == "0x030200" &&
                                               !gpus.count(canonicalBusId(l.attrOr("target", "")));
                                      }),
                       c.children.end());
    dropDanglingNvlinks(c, gpus);
  }
}

void gpuBusIds(const XmlElement& e, std::set<std::string>* out) {
  for (const XmlElement& c : e.children) {
    if (c.name == "pci" && childNamed(c, "gpu")) out->insert(canonicalBusId(c.attrOr("busid", "")));
    gpuBusIds(c, out);
  }
}

}  // namespace

void mergeDiscovered(XmlElement& file, const XmlElement& discovered, std::vector<std::string>* warnings) {
  std::map<std::string, const XmlElement*> found;
  describedDevices(discovered, &found);
  std::set<std::string> used, gpus;
  fillBare(file, found, &used);
  std::set<std::string> inFile;
  gpuBusIds(file, &inFile);
  for (const auto& [busid, e] : found)
    if (childNamed(*e, "gpu") && !inFile.count(busid))
      warnings->push_back(format("GPU %s was discovered but NCCL_TOPO_FILE has no PCI position for it; left out",
                                 busid.c_str()));
  dropBareGpus(file, warnings, "NCCL_TOPO_FILE lists it bare and discovery did not find it");
  gpuBusIds(file, &gpus);
  dropDanglingNvlinks(file, gpus);
}

XmlElement discoverLocalTopology(std::vector<std::string>* warnings) {
  XmlElement root = hwlocTopology(warnings);
  std::string why;
  std::vector<NvmlGpu> gpus = probeNvmlGpus(&why);
  attachGpus(root, gpus, warnings);
  dropBareGpus(root, warnings, why.empty() ? "NVML did not list it" : why);
  return root;
}

std::string presetDir() {
  const std::string& dir = config().presetDir;
  if (!dir.empty()) return dir;
  // The source tree's while it is there (a build), else where `cmake --install` put them.
  return access(STRATA_SOURCE_PRESET_DIR, F_OK) == 0 ? STRATA_SOURCE_PRESET_DIR : STRATA_INSTALL_PRESET_DIR;
}

std::string resolvePreset(const std::string& nameOrPath) {
  if (exists(nameOrPath)) return nameOrPath;
  std::string dir = presetDir(), names, match;
  if (DIR* d = opendir(dir.c_str())) {
    std::vector<std::string> files;
    while (dirent* e = readdir(d)) {
      std::string f = e->d_name;
      if (f.size() > 4 && f.substr(f.size() - 4) == ".xml") files.push_back(f);
    }
    closedir(d);
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      std::string stem = f.substr(0, f.size() - 4);
      names += (names.empty() ? "" : ", ") + stem;
      if (match.empty() && (stem == nameOrPath || stem.rfind(nameOrPath + "-", 0) == 0)) match = dir + "/" + f;
    }
  }
  if (match.empty())
    fail(ncclInvalidUsage, "topology '%s': no such file, and no preset of that name in %s (presets: %s)",
         nameOrPath.c_str(), dir.c_str(), names.empty() ? "none" : names.c_str());
  return match;
}

}  // namespace strata::topology
