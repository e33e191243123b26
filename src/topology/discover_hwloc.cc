// The one file that includes hwloc.
#include <hwloc.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "base/error.h"
#include "topology/discover.h"

namespace strata::topology {
namespace {

using PciAttr = hwloc_obj_attr_u::hwloc_pcidev_attr_s;

std::string busIdOf(const PciAttr& p) {
  return format("%04x:%02x:%02x.%x", p.domain, p.bus, p.dev, p.func);
}

std::string readLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// NCCL's affinity format: the cpuset in 32-bit hex groups, most significant first.
std::string affinity(hwloc_const_bitmap_t set) {
  int last = hwloc_bitmap_last(set);
  if (last < 0) return "";
  std::string out;
  for (int g = last / 32; g >= 0; --g) {
    unsigned bits = 0;
    for (int b = 0; b < 32; ++b)
      if (hwloc_bitmap_isset(set, static_cast<unsigned>(g * 32 + b))) bits |= 1u << b;
    out += format("%s%08x", out.empty() ? "" : ",", bits);
  }
  return out;
}

void setPciAttrs(XmlElement& e, const PciAttr& p, unsigned classCode) {
  std::string busid = busIdOf(p);
  e.set("busid", busid);
  e.set("class", format("0x%06x", classCode));
  e.set("vendor", format("0x%04x", p.vendor_id));
  e.set("device", format("0x%04x", p.device_id));
  e.set("subsystem_vendor", format("0x%04x", p.subvendor_id));
  e.set("subsystem_device", format("0x%04x", p.subdevice_id));
  // sysfs has the generation and width that NCCL's format wants; hwloc only a rate.
  std::string dir = "/sys/bus/pci/devices/" + busid + "/";
  std::string speed = readLine(dir + "max_link_speed"), width = readLine(dir + "max_link_width");
  if (!speed.empty() && speed.find("Unknown") == std::string::npos) e.set("link_speed", speed);
  if (!width.empty() && width != "0") e.set("link_width", width);
}

// The NIC's rate in Mb/s: Ethernet from /sys/class/net, InfiniBand from the port rate.
long nicSpeedMbps(hwloc_obj_t osdev) {
  if (osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
    long s = atol(readLine(std::string("/sys/class/net/") + osdev->name + "/speed").c_str());
    return s > 0 ? s : 0;
  }
  long gbps = atol(readLine(std::string("/sys/class/infiniband/") + osdev->name + "/ports/1/rate").c_str());
  return gbps * 1000;
}

bool isGpu(const PciAttr& p) { return p.vendor_id == 0x10de && (p.class_id >> 8) == 0x03; }

hwloc_obj_t networkDevice(hwloc_obj_t pci) {
  for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
    if (c->type == HWLOC_OBJ_OS_DEVICE &&
        (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS || c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK))
      return c;
  return nullptr;
}

// The <pci> element for `obj` under `cpu`, creating it and its bridges.
XmlElement& pciElement(XmlElement& cpu, hwloc_obj_t obj) {
  std::vector<hwloc_obj_t> chain;  // the device, then its bridges up to (not including) the host bridge
  for (hwloc_obj_t o = obj; o && hwloc_obj_type_is_io(o->type); o = o->parent) {
    if (o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI) break;
    chain.push_back(o);
  }
  XmlElement* at = &cpu;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    hwloc_obj_t o = *it;
    bool bridge = o->type == HWLOC_OBJ_BRIDGE;
    const PciAttr& p = bridge ? o->attr->bridge.upstream.pci : o->attr->pcidev;
    std::string busid = busIdOf(p);
    XmlElement* found = nullptr;
    for (XmlElement& c : at->children)
      if (c.name == "pci" && c.attrOr("busid", "") == busid) found = &c;
    if (!found) {
      found = &at->add("pci");
      setPciAttrs(*found, p, bridge ? 0x060400 : static_cast<unsigned>(p.class_id) << 8);
    }
    at = found;
  }
  return *at;
}

// The NUMA domain a device hangs under, or -1 when hwloc attaches it to several
// (the machine as a whole: locality unknown).
int numaOf(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (!anc || !anc->nodeset || hwloc_bitmap_weight(anc->nodeset) != 1) return -1;
  return hwloc_bitmap_first(anc->nodeset);
}

}  // namespace

namespace {

// One <cpu> per NUMA domain (one for the machine when hwloc reports none).
std::map<int, XmlElement*> addCpus(hwloc_topology_t topo, XmlElement& root) {
  struct utsname u;
  std::string arch = uname(&u) == 0 ? u.machine : "x86_64";
  if (arch == "aarch64") arch = "arm64";
  hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
  auto info = [&](const char* key) {
    const char* v = pkg ? hwloc_obj_get_info_by_name(pkg, key) : nullptr;
    return std::string(v ? v : "");
  };
  std::map<int, XmlElement*> cpus;
  int numas = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  root.children.reserve(numas > 0 ? numas : 1);  // the map keeps pointers into it
  for (int i = 0; i < std::max(numas, 1); ++i) {
    hwloc_obj_t numa = numas > 0 ? hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i) : nullptr;
    XmlElement& cpu = root.add("cpu");
    int id = numa ? static_cast<int>(numa->os_index) : 0;
    cpu.set("numaid", std::to_string(id));
    cpu.set("affinity", affinity(numa ? numa->cpuset : hwloc_topology_get_topology_cpuset(topo)));
    cpu.set("arch", arch);
    if (!info("CPUVendor").empty()) cpu.set("vendor", info("CPUVendor"));
    if (!info("CPUFamilyNumber").empty()) cpu.set("familyid", info("CPUFamilyNumber"));
    if (!info("CPUModelNumber").empty()) cpu.set("modelid", info("CPUModelNumber"));
    cpus[id] = &cpu;
  }
  return cpus;
}

void addPort(XmlElement& pci, hwloc_obj_t net, int dev, std::vector<std::string>* warnings) {
  XmlElement& port = pci.add("nic").add("net");
  port.set("name", net->name);
  port.set("dev", std::to_string(dev));
  long speed = nicSpeedMbps(net);
  if (speed > 0)
    port.set("speed", std::to_string(speed));
  else
    warnings->push_back(format("NIC %s reports no link speed; NCCL's default 10 Gb/s is assumed", net->name));
  port.set("port", "1");
  port.set("gdr", "0");
}

// The PCI paths to every NVIDIA GPU and every network device, under their NUMA domain.
void addDevices(hwloc_topology_t topo, std::map<int, XmlElement*>& cpus, std::vector<std::string>* warnings) {
  int firstNuma = cpus.begin()->first, devices = 0, nics = 0, unplaced = 0;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, nullptr); o; o = hwloc_get_next_pcidev(topo, o)) {
    hwloc_obj_t net = networkDevice(o);
    if (!isGpu(o->attr->pcidev) && !net) continue;
    int numa = numaOf(topo, o);
    if (numa < 0 || !cpus.count(numa)) {
      ++unplaced;
      numa = firstNuma;
    }
    XmlElement& e = pciElement(*cpus[numa], o);
    ++devices;
    if (net) addPort(e, net, nics++, warnings);
  }
  if (devices == 0) warnings->push_back("hwloc sees no GPU and no NIC on PCI (a container or VM hiding /sys/bus/pci?)");
  if (unplaced)
    warnings->push_back(format("%d PCI device(s) report no NUMA node (a VM?); placed on NUMA %d", unplaced, firstNuma));
}

}  // namespace

XmlElement hwlocTopology(std::vector<std::string>* warnings) {
  XmlElement root;
  root.name = "system";
  root.set("version", "1");
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) {
    warnings->push_back("hwloc could not start; the topology is one CPU with no devices");
    root.add("cpu").set("numaid", "0");
    return root;
  }
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // The Linux component reads the PCI tree from sysfs by itself. The libpciaccess
  // plugin adds nothing here and leaks (LeakSanitizer sees it in every process);
  // the GPU plugins would load vendor runtimes: NVML is ours to load.
  for (const char* plugin : {"pci", "opencl", "cuda", "nvml", "rsmi", "levelzero", "gl"})
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, plugin);
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    warnings->push_back("hwloc could not read this machine; the topology is one CPU with no devices");
    root.add("cpu").set("numaid", "0");
    return root;
  }
  std::map<int, XmlElement*> cpus = addCpus(topo, root);
  addDevices(topo, cpus, warnings);
  hwloc_topology_destroy(topo);
  return root;
}

}  // namespace strata::topology
