#include "topology/system.h"

#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <sstream>

#include "base/error.h"

namespace strata::topology {
namespace {

constexpr const char* kPathNames[] = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"};

// Integer attribute in decimal or 0x hex; `fallback` when absent.
long number(const XmlElement& e, const char* key, long fallback, const std::string& source) {
  const std::string* v = e.attr(key);
  if (!v) return fallback;
  char* end = nullptr;
  long n = strtol(v->c_str(), &end, 0);
  if (v->empty() || *end != '\0')
    fail(ncclInvalidUsage, "topology XML %s:%d: <%s %s=\"%s\"> is not a number", source.c_str(), e.line,
         e.name.c_str(), key, v->c_str());
  return n;
}

const std::string& required(const XmlElement& e, const char* key, const std::string& source) {
  const std::string* v = e.attr(key);
  if (!v || v->empty())
    fail(ncclInvalidUsage, "topology XML %s:%d: <%s> needs a %s attribute", source.c_str(), e.line, e.name.c_str(), key);
  return *v;
}

bool hexRun(const std::string& s, size_t* i, size_t minDigits, size_t maxDigits) {
  size_t start = *i;
  while (*i < s.size() && isxdigit(static_cast<unsigned char>(s[*i])) && *i - start < maxDigits) ++*i;
  return *i - start >= minDigits;
}

// A PCI address as NCCL writes it: [domain:]bus:device.function, in hex.
bool isBusId(const std::string& s) {
  size_t i = 0, colons = std::count(s.begin(), s.end(), ':');
  if (colons == 2 && !(hexRun(s, &i, 4, 8) && i < s.size() && s[i++] == ':')) return false;
  if (colons != 1 && colons != 2) return false;
  return hexRun(s, &i, 2, 2) && i < s.size() && s[i++] == ':' && hexRun(s, &i, 2, 2) && i < s.size() &&
         s[i++] == '.' && hexRun(s, &i, 1, 1) && i == s.size();
}

// A CPU mask as NCCL writes it: groups of up to 8 hex digits separated by commas.
bool isAffinity(const std::string& s) {
  size_t i = 0;
  for (;;) {
    if (!hexRun(s, &i, 1, 8)) return false;
    if (i == s.size()) return true;
    if (s[i++] != ',') return false;
  }
}

const XmlElement* child(const XmlElement& e, const char* name) {
  for (const XmlElement& c : e.children)
    if (c.name == name) return &c;
  return nullptr;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const char* nodeTypeName(NodeType t) {
  static const char* names[] = {"GPU", "PCI", "NVS", "CPU", "NIC", "NET"};
  return names[static_cast<int>(t)];
}
const char* pathTypeName(PathType t) { return kPathNames[static_cast<int>(t)]; }
const char* linkTypeName(LinkType t) {
  switch (t) {
    case LinkType::kLoc: return "LOC";
    case LinkType::kNvl: return "NVL";
    case LinkType::kC2c: return "C2C";
    case LinkType::kPci: return "PCI";
    case LinkType::kSys: return "SYS";
    case LinkType::kNet: return "NET";
  }
  return "?";
}

bool parsePathType(const std::string& text, PathType* out) {
  for (int i = 0; i <= static_cast<int>(PathType::kNet); ++i)
    if (strcasecmp(text.c_str(), kPathNames[i]) == 0) {
      *out = static_cast<PathType>(i);
      return true;
    }
  // NCCL's old numeric levels.
  static const PathType kLegacy[] = {PathType::kLoc, PathType::kPix, PathType::kPxb, PathType::kPhb, PathType::kSys, PathType::kSys};
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '5') {
    *out = kLegacy[text[0] - '0'];
    return true;
  }
  return false;
}

double nvlinkBwPerLink(int sm) {
  if (sm >= 100) return 40.1;
  if (sm >= 90) return 20.6;
  if (sm == 86) return 12.0;
  if (sm >= 70) return 20.0;
  if (sm >= 60) return 18.0;
  return 20.0;
}

double pciBw(const std::string& speed, const std::string& width) {
  // Per-lane rate in units of 100 Mb/s after encoding, keyed by the GT/s figure.
  static const std::pair<double, double> kRates[] = {{2.5, 15}, {5, 30}, {8, 60}, {16, 120}, {32, 240}, {64, 480}};
  double gts = atof(speed.c_str()), rate = 60;
  for (const auto& [g, r] : kRates)
    if (gts == g) rate = r;
  int lanes = atoi(width.c_str());
  if (lanes <= 0) lanes = 16;
  return lanes * rate / 80.0;
}

double interSocketBw(const Node& cpu) {
  if (cpu.arch == "ppc64") return 32;
  if (cpu.arch == "arm64") return 6;
  if (cpu.vendor == "AuthenticAMD") return 16;
  if (cpu.vendor == "GenuineIntel") {
    if (cpu.model >= 0xCF) return 40;  // Emerald Rapids and later
    if (cpu.model >= 0x8F) return 22;  // Sapphire Rapids
    if (cpu.model >= 0x55) return 10;  // Skylake-SP .. Ice Lake
    return 6;                          // Broadwell
  }
  return 6;
}

int System::addNode(Node n) {
  nodes_.push_back(std::move(n));
  return static_cast<int>(nodes_.size()) - 1;
}

void System::connect(int a, int b, LinkType t, double bw, int count) {
  for (Link& l : nodes_[a].links)
    if (l.to == b && l.type == t) {
      l.bw += bw;
      l.count += count;
      return;
    }
  nodes_[a].links.push_back(Link{b, t, bw, count});
}

void System::addPciTree(const XmlElement& e, int parent, int cpu, const std::string& source,
                        std::vector<PendingNvlink>& nvlinks) {
  const std::string& busid = required(e, "busid", source);
  if (!e.attr("strata-synthetic") && !isBusId(busid))
    fail(ncclInvalidUsage, "topology XML %s:%d: <pci busid=\"%s\"> is not a PCI address (hex [DDDD:]BB:DD.F)",
         source.c_str(), e.line, busid.c_str());
  double bw = pciBw(e.attrOr("link_speed", ""), e.attrOr("link_width", ""));
  int lanes = atoi(e.attrOr("link_width", "16").c_str());
  Node n;
  n.id = lower(busid);
  n.cpu = cpu;
  if (const XmlElement* g = child(e, "gpu")) {
    n.type = NodeType::kGpu;
    n.index = static_cast<int>(number(*g, "dev", -1, source));
    n.sm = static_cast<int>(number(*g, "sm", 0, source));
    n.rank = static_cast<int>(number(*g, "rank", -1, source));
    n.p2p = number(*g, "p2p", 1, source) != 0;
    int id = addNode(n);
    for (const XmlElement& l : g->children)
      if (l.name == "nvlink")
        nvlinks.push_back({id, lower(required(l, "target", source)), l.attrOr("tclass", ""),
                                   static_cast<int>(number(l, "count", 1, source))});
    connect(id, parent, LinkType::kPci, bw, lanes);
    connect(parent, id, LinkType::kPci, bw, lanes);
    return;
  }
  const XmlElement* nic = child(e, "nic");
  n.type = nic ? NodeType::kNic : NodeType::kPci;
  int id = addNode(n);
  connect(id, parent, LinkType::kPci, bw, lanes);
  connect(parent, id, LinkType::kPci, bw, lanes);
  for (const XmlElement& c : e.children) {
    if (c.name == "pci") addPciTree(c, id, cpu, source, nvlinks);
    if (c.name != "nic") continue;
    for (const XmlElement& net : c.children) {
      if (net.name != "net") continue;
      Node p;
      p.type = NodeType::kNet;
      p.id = required(net, "name", source);
      p.index = static_cast<int>(number(net, "dev", -1, source));
      p.speedMbps = static_cast<double>(number(net, "speed", 0, source));
      p.port = static_cast<int>(number(net, "port", 0, source));
      if (p.speedMbps <= 0) p.speedMbps = 10000;  // NCCL's default when a plugin reports none
      p.gdr = number(net, "gdr", 0, source) != 0;
      p.cpu = cpu;
      int port = addNode(p);
      connect(id, port, LinkType::kNet, p.speedMbps / 8000.0);
      connect(port, id, LinkType::kNet, p.speedMbps / 8000.0);
    }
  }
}

void System::addNvlinks(const std::vector<PendingNvlink>& nvlinks) {
  int nvs = -1;
  for (const PendingNvlink& p : nvlinks) {
    Node& g = nodes_[p.gpu];
    double bw = p.count * nvlinkBwPerLink(g.sm);
    int target = -1;
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i)
      if (nodes_[i].type == NodeType::kGpu && nodes_[i].id == p.target) target = i;
    if (target >= 0) {  // one direction per entry: the peer's own entry gives the other
      connect(p.gpu, target, LinkType::kNvl, bw, p.count);
    } else if (p.tclass == "0x068001") {  // a CPU on NVLink (POWER): mirrored
      connect(p.gpu, g.cpu, LinkType::kNvl, bw, p.count);
      connect(g.cpu, p.gpu, LinkType::kNvl, bw, p.count);
    } else {  // NVSwitches (and targets a VM hides) collapse into one node
      if (nvs < 0) {
        Node s;
        s.type = NodeType::kNvs;
        s.id = "nvswitch";
        nvs = addNode(s);
      }
      connect(p.gpu, nvs, LinkType::kNvl, bw, p.count);
      connect(nvs, p.gpu, LinkType::kNvl, bw, p.count);
    }
  }
}

System System::fromXml(const XmlElement& root, const std::string& source) {
  if (root.name != "system")
    fail(ncclInvalidUsage, "topology XML %s:%d: the root element is <%s>, expected <system>", source.c_str(), root.line,
         root.name.c_str());
  System s;
  s.xml_ = root;
  std::vector<PendingNvlink> nvlinks;
  for (const XmlElement& c : root.children) {
    if (c.name != "cpu") continue;
    Node cpu;
    cpu.type = NodeType::kCpu;
    cpu.index = static_cast<int>(number(c, "numaid", -1, source));
    if (cpu.index < 0) cpu.index = static_cast<int>(s.ofType(NodeType::kCpu).size());
    cpu.id = "numa" + std::to_string(cpu.index);
    cpu.vendor = c.attrOr("vendor", "");
    cpu.arch = c.attrOr("arch", "x86_64");
    cpu.affinity = c.attrOr("affinity", "");
    if (c.attr("affinity") && !isAffinity(cpu.affinity))
      fail(ncclInvalidUsage, "topology XML %s:%d: <cpu affinity=\"%s\"> is not a CPU mask (groups of up to 8 hex "
           "digits separated by commas, as NCCL writes it)", source.c_str(), c.line, cpu.affinity.c_str());
    cpu.family = static_cast<int>(number(c, "familyid", 0, source));
    cpu.model = static_cast<int>(number(c, "modelid", 0, source));
    for (int other : s.ofType(NodeType::kCpu))
      if (s.nodes_[other].index == cpu.index)
        fail(ncclInvalidUsage, "topology XML %s:%d: numaid %d appears twice", source.c_str(), c.line, cpu.index);
    int id = s.addNode(cpu);
    s.nodes_[id].cpu = id;
    for (const XmlElement& p : c.children) {
      if (p.name == "pci") s.addPciTree(p, id, id, source, nvlinks);
      if (p.name == "nic") {  // a NIC with no PCI path: straight on the CPU
        XmlElement wrapped;
        wrapped.name = "pci";
        wrapped.line = p.line;
        wrapped.set("busid", "nic-on-" + s.nodes_[id].id + "-" + std::to_string(p.line));
        wrapped.set("strata-synthetic", "1");  // no PCI address to check
        wrapped.children.push_back(p);
        s.addPciTree(wrapped, id, id, source, nvlinks);
      }
    }
  }
  std::vector<int> cpus = s.ofType(NodeType::kCpu);
  if (cpus.empty()) fail(ncclInvalidUsage, "topology XML %s:%d: <system> has no <cpu>", source.c_str(), root.line);
  for (int a : cpus)
    for (int b : cpus)
      if (a != b) s.connect(a, b, LinkType::kSys, interSocketBw(s.nodes_[a]));
  s.addNvlinks(nvlinks);
  for (int i = 0; i < static_cast<int>(s.nodes_.size()); ++i)
    for (int j = 0; j < static_cast<int>(s.nodes_.size()); ++j)
      if (i != j && s.nodes_[i].type == NodeType::kGpu && s.nodes_[j].type == NodeType::kGpu &&
          s.nodes_[i].id == s.nodes_[j].id)
        fail(ncclInvalidUsage, "topology XML %s: GPU bus id %s appears twice", source.c_str(), s.nodes_[i].id.c_str());
  s.computePaths();
  return s;
}

std::vector<int> System::ofType(NodeType t) const {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i)
    if (nodes_[i].type == t) out.push_back(i);
  return out;
}

double System::linkBw(int a, int b) const {
  double bw = 0;
  for (const Link& l : nodes_[a].links)
    if (l.to == b) bw = std::max(bw, l.bw);
  return bw;
}

namespace {

// The class of one hop, as NCCL reclassifies PCI hops by what they touch.
PathType hopType(const std::vector<Node>& nodes, int src, int u, const Link& l) {
  const Node &a = nodes[u], &b = nodes[l.to];
  switch (l.type) {
    case LinkType::kNvl: return a.type == NodeType::kGpu && u != src ? PathType::kNvb : PathType::kNvl;
    case LinkType::kPci:
      if (a.type == NodeType::kCpu || b.type == NodeType::kCpu) return PathType::kPhb;
      if (a.type == NodeType::kPci && b.type == NodeType::kPci) return PathType::kPxb;
      return PathType::kPix;
    case LinkType::kC2c: return PathType::kC2c;
    case LinkType::kSys: return PathType::kSys;
    case LinkType::kNet: return PathType::kLoc;  // a NIC to its own port: the path class is the PCI one
    case LinkType::kLoc: return PathType::kLoc;
  }
  return PathType::kDis;
}

// Whether a path may continue through node u: GPUs only as one NVLink relay
// (NVB), network ports never.
bool transits(const std::vector<Node>& nodes, int src, int u, const Path& toU, const Link& next) {
  const Node& n = nodes[u];
  if (u == src) return true;
  if (n.type == NodeType::kNet) return false;
  if (n.type == NodeType::kGpu)
    return toU.hops.size() == 1 && toU.type == PathType::kNvl && next.type == LinkType::kNvl &&
           nodes[src].type == NodeType::kGpu;
  return true;
}

}  // namespace

// Breadth first from every node: fewest hops, then the widest bottleneck, then
// the better class.
void System::computePaths() {
  int n = static_cast<int>(nodes_.size());
  paths_.assign(n, std::vector<Path>(n));
  for (int s = 0; s < n; ++s) {
    std::vector<Path>& out = paths_[s];
    out[s] = Path{PathType::kLoc, 5000.0, {}};
    std::vector<int> frontier{s};
    while (!frontier.empty()) {
      std::vector<int> next;
      for (int u : frontier)
        for (const Link& l : nodes_[u].links) {
          if (l.to == s || !transits(nodes_, s, u, out[u], l)) continue;
          Path cand;
          cand.type = std::max(out[u].type, hopType(nodes_, s, u, l));
          cand.bw = std::min(out[u].bw, l.bw);
          cand.hops = out[u].hops;
          cand.hops.push_back(l.to);
          Path& cur = out[l.to];
          bool unseen = cur.type == PathType::kDis;
          if (!unseen && cur.hops.size() < cand.hops.size()) continue;
          if (unseen || cand.bw > cur.bw || (cand.bw == cur.bw && cand.type < cur.type)) {
            if (unseen) next.push_back(l.to);
            cur = std::move(cand);
          }
        }
      frontier = std::move(next);
    }
  }
}

std::string System::label(int i) const {
  const Node& n = nodes_[i];
  switch (n.type) {
    case NodeType::kGpu: return "GPU" + std::to_string(n.index >= 0 ? n.index : i);
    case NodeType::kNvs: return "NVSwitch";
    case NodeType::kCpu: return "CPU" + std::to_string(n.index);
    case NodeType::kNet: return "NET " + n.id;
    case NodeType::kNic: return "NIC " + n.id;
    case NodeType::kPci: return "PCI " + n.id;
  }
  return "?";
}

std::string System::describe() const {
  std::ostringstream os;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    const Node& n = nodes_[i];
    os << "  " << label(i);
    if (n.type == NodeType::kGpu) os << " " << n.id << " sm" << n.sm << (n.p2p ? "" : " no-p2p");
    if (n.type == NodeType::kCpu)
      os << " " << (n.vendor.empty() ? "unknown vendor" : n.vendor) << " family " << n.family << " model " << n.model;
    if (n.type == NodeType::kNet) os << " " << n.speedMbps / 1000 << " Gb/s" << (n.gdr ? " gdr" : "");
    os << "\n";
    for (const Link& l : n.links) {
      char bw[32];
      snprintf(bw, sizeof bw, "%.1f", l.bw);
      os << "      -> " << label(l.to) << "  " << linkTypeName(l.type);
      if (l.type == LinkType::kNvl) os << " x" << l.count;
      os << " " << bw << " GB/s\n";
    }
  }
  return os.str();
}

}  // namespace strata::topology
