// Which GID a RoCE port is addressed by: NCCL_IB_GID_INDEX, else NCCL's choice
// over the port's GID table by NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE and
// NCCL_IB_ROCE_VERSION_NUM. The one place that decides it.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "transports/ib/verbs_lib.h"

namespace strata::transport::ib {

// NCCL_IB_ADDR_RANGE parsed for one address family: "a.b.c.d/n" (AF_INET) or
// "x:y::z/n" (AF_INET6). prefixLen 0 takes every address.
struct AddrRange {
  int family = 0;
  uint8_t addr[16] = {};
  int prefixLen = 0;
};
// `text` empty: every address. Malformed, of the other family, or a prefix too
// long: every address, and *why says what was wrong.
AddrRange parseAddrRange(const std::string& text, int family, std::string* why);

// The family of the address a GID carries: AF_INET for an IPv4-mapped one
// (::ffff:a.b.c.d, or its multicast form ff0e::ffff:a.b.c.d), else AF_INET6.
int gidFamily(const ibv_gid& g);
// Neither unset (::, or fe80:: with nothing after) nor link-local (fe80::/64).
bool routableGid(const ibv_gid& g);
bool inRange(const AddrRange& r, const ibv_gid& g);
// "::ffff:10.0.0.5" / "fe80::5054:ff:fe12:3456".
std::string gidText(const ibv_gid& g);

// The GID index RoCE traffic uses on a port (0 on InfiniBand): NCCL_IB_GID_INDEX,
// else NCCL's walk of the table from index 0: a GID of the wanted family in the
// range replaces one of the other family; among the wanted family, a routable GID
// in the range of the wanted RoCE version replaces one of another version or one
// not routable. With no routable address of the family, index 0. The GID types
// come from ibv_query_gid_ex, or where rdma-core lacks it (before v34) from sysfs
// under `sysfsRoot`, as NCCL reads them.
int chooseGidIndex(const Verbs& v, ibv_context* ctx, const std::string& device, int port, const ibv_port_attr& attr,
                   const std::string& sysfsRoot = "/sys");

// The RoCE version (1, 2) sysfs gives GID `index` ("IB/RoCE v1", "RoCE v2" in
// <root>/class/infiniband/<device>/ports/<port>/gid_attrs/types/<index>); -1 when
// it cannot be read.
int roceVersionFromSysfs(const std::string& root, const std::string& device, int port, int index);

}  // namespace strata::transport::ib
