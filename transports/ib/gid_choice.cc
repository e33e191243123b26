#include "transports/ib/gid_choice.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"

namespace strata::transport::ib {
namespace {

bool zeros(const uint8_t* p, int n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

struct Entry {
  ibv_gid gid{};
  int version = -1;  // RoCE 1 or 2; -1 unknown (an unused entry)
};

// The range NCCL_IB_ADDR_RANGE gives, warned about once when malformed.
AddrRange configuredRange(int family) {
  std::string why;
  AddrRange r = parseAddrRange(config().ibAddrRange, family, &why);
  static std::once_flag warned;
  if (!why.empty())
    std::call_once(warned, [&] { STRATA_WARN(-1, "IB: NCCL_IB_ADDR_RANGE=%s %s: ignored", config().ibAddrRange.c_str(), why.c_str()); });
  return r;
}

}  // namespace

AddrRange parseAddrRange(const std::string& text, int family, std::string* why) {
  AddrRange r;
  r.family = family;
  if (text.empty()) return r;
  size_t slash = text.find('/');
  const char* fam = family == AF_INET ? "AF_INET" : "AF_INET6";
  if (slash == std::string::npos) {
    *why = "has no prefix length (address/bits)";
    return r;
  }
  char* end = nullptr;
  long bits = strtol(text.c_str() + slash + 1, &end, 10);
  int most = family == AF_INET ? 32 : 128;
  if (slash + 1 == text.size() || *end != '\0' || bits < 0 || bits > most) {
    *why = format("has a prefix length that is not 0-%d", most);
    return r;
  }
  if (inet_pton(family, text.substr(0, slash).c_str(), r.addr) != 1) {
    *why = format("is not an address of NCCL_IB_ADDR_FAMILY %s", fam);
    return r;
  }
  r.prefixLen = static_cast<int>(bits);
  return r;
}

int gidFamily(const ibv_gid& g) {
  const uint8_t* r = g.raw;
  bool mappedTail = r[10] == 0xff && r[11] == 0xff;
  bool mapped = zeros(r, 10) && mappedTail;
  bool mappedMulticast = r[0] == 0xff && r[1] == 0x0e && zeros(r + 2, 8) && mappedTail;
  return mapped || mappedMulticast ? AF_INET : AF_INET6;
}

bool routableGid(const ibv_gid& g) {
  const uint8_t* r = g.raw;
  bool fe80 = r[0] == 0xfe && r[1] == 0x80 && zeros(r + 2, 2);
  bool unset = (zeros(r, 4) || fe80) && zeros(r + 4, 12);
  bool linkLocal = fe80 && zeros(r + 4, 4);
  return !unset && !linkLocal;
}

bool inRange(const AddrRange& r, const ibv_gid& g) {
  if (r.prefixLen == 0) return true;
  // The IPv4 address of a mapped GID is its last four bytes.
  const uint8_t* a = r.family == AF_INET ? g.raw + 12 : g.raw;
  int full = r.prefixLen / 8, rest = r.prefixLen % 8;
  if (!std::equal(a, a + full, r.addr)) return false;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[full] & mask) == (r.addr[full] & mask);
}

std::string gidText(const ibv_gid& g) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, g.raw, text, sizeof(text));
  return text;
}

int roceVersionFromSysfs(const std::string& root, const std::string& device, int port, int index) {
  std::string path = format("%s/class/infiniband/%s/ports/%d/gid_attrs/types/%d", root.c_str(), device.c_str(), port,
                            index);
  std::ifstream in(path);
  std::string type;
  if (!std::getline(in, type)) return -1;  // unreadable, or a GID with no type (unused)
  if (type.find("RoCE v2") != std::string::npos) return 2;
  if (type.find("RoCE v1") != std::string::npos) return 1;
  return -1;
}

int chooseGidIndex(const Verbs& v, ibv_context* ctx, const std::string& device, int port, const ibv_port_attr& attr,
                   const std::string& sysfsRoot) {
  if (attr.link_layer != IBV_LINK_LAYER_ETHERNET) {  // InfiniBand, as NCCL: the routable GID where it has an FLID
    int routable = config().ibRoutableFlidGidIndex;
    ibv_gid g{};
    if (routable < attr.gid_tbl_len && v.queryGid(ctx, static_cast<uint8_t>(port), routable, &g) == 0 &&
        (g.raw[4] | g.raw[5]) != 0)
      return routable;
    return 0;
  }
  if (config().ibGidIndex >= 0) return config().ibGidIndex;
  // GID i and its version: from ibv_query_gid_ex, else ibv_query_gid and sysfs; an
  // entry that cannot be read counts as unset.
  auto entry = [&](int i) {
    Entry e;
    if (v.queryGidEx) {
      ibv_gid_entry x{};
      if (v.queryGidEx(ctx, static_cast<uint32_t>(port), static_cast<uint32_t>(i), &x, 0, sizeof(x)) != 0) return e;
      e.gid = x.gid;
      e.version = x.gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : x.gid_type == IBV_GID_TYPE_ROCE_V1 ? 1 : -1;
      return e;
    }
    if (v.queryGid(ctx, static_cast<uint8_t>(port), i, &e.gid) != 0) return Entry{};
    e.version = roceVersionFromSysfs(sysfsRoot, device, port, i);
    return e;
  };
  int family = config().ibAddrFamily == "AF_INET6" ? AF_INET6 : AF_INET;
  AddrRange range = configuredRange(family);
  int version = config().ibRoceVersion;
  int best = 0;
  Entry b = entry(0);
  for (int i = 1; i < attr.gid_tbl_len; ++i) {
    Entry c = entry(i);
    int cf = gidFamily(c.gid);
    bool ok = cf == family && inRange(range, c.gid);
    bool otherFamily = ok && cf != gidFamily(b.gid);
    bool better = ok && routableGid(c.gid) && c.version == version &&
                  (b.version != c.version || !routableGid(b.gid));
    if (otherFamily || better) best = i, b = c;
  }
  return best;
}

}  // namespace strata::transport::ib
