#include "topology/local.h"

#include <sched.h>

#include <map>
#include <mutex>

#include "topology/discover.h"

namespace strata::topology {

std::shared_ptr<const LocalTopology> localTopology(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const LocalTopology>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(file);
  if (it != cache.end()) return it->second;
  auto t = std::make_shared<LocalTopology>();
  if (file.empty()) {
    t->sys = System::fromXml(discoverLocalTopology(&t->warnings), "discovered");
    t->source = "discovered (hwloc, NVML)";
  } else {
    // As NCCL: the file is a base that discovery completes (a PCI-only file gets its
    // GPUs, NVLinks and NICs); NCCL_TOPO_DUMP_FILE writes the merged result.
    XmlElement xml = loadXmlFile(file);
    mergeDiscovered(xml, discoverLocalTopology(&t->warnings), &t->warnings);
    t->sys = System::fromXml(xml, file);
    t->source = file;
    t->fromFile = true;
  }
  cache[file] = t;
  return t;
}

int currentNumaNode() {
  unsigned cpu = 0, node = 0;
  return getcpu(&cpu, &node) == 0 ? static_cast<int>(node) : 0;
}

std::vector<int> rankDevices(const System& sys, const std::vector<std::string>& busIds, const std::vector<int>& numas) {
  std::vector<int> gpus;
  for (const std::string& id : busIds)
    for (int g : sys.ofType(NodeType::kGpu))
      if (!id.empty() && sys.node(g).id == id) gpus.push_back(g);
  if (!busIds.empty() && gpus.size() == busIds.size()) return gpus;
  std::vector<int> cpus;
  for (int numa : numas) cpus.push_back(cpuForNuma(sys, numa));
  return cpus;
}

RailId railIdentity(const System& sys, int net) {
  RailId r{sys.node(net).id, "", sys.node(net).port};
  for (const Link& l : sys.node(net).links)
    if (sys.node(l.to).type == NodeType::kNic) r.busId = sys.node(l.to).id;
  return r;
}

int cpuForNuma(const System& sys, int numa) {
  std::vector<int> cpus = sys.ofType(NodeType::kCpu);
  for (int c : cpus)
    if (sys.node(c).index == numa) return c;
  return cpus.front();
}

}  // namespace strata::topology
