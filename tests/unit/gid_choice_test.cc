// The RoCE GID choice (transports/ib/gid_choice.h) over scripted GID tables as
// ConnectX ports show them (show_gids): link-local GIDs first, then one IPv4-mapped
// and one IPv6 GID per address, each as RoCE v1 and v2; NCCL_IB_ADDR_FAMILY,
// NCCL_IB_ADDR_RANGE and NCCL_IB_ROCE_VERSION_NUM as NCCL reads them.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "base/config.h"
#include "transports/ib/gid_choice.h"

namespace strata::transport::ib {
namespace {

// The port's table: address text ("" unused) and RoCE version.
std::vector<std::pair<std::string, int>> gTable;

ibv_gid gidOf(const std::string& text) {
  ibv_gid g{};
  if (!text.empty()) {
    EXPECT_EQ(inet_pton(AF_INET6, text.c_str(), g.raw), 1) << text;
  }
  return g;
}
int fakeQueryGid(ibv_context*, uint8_t, int i, ibv_gid* g) {
  if (i < 0 || i >= static_cast<int>(gTable.size())) return EINVAL;
  *g = gidOf(gTable[i].first);
  return 0;
}
int fakeQueryGidEx(ibv_context*, uint32_t, uint32_t i, ibv_gid_entry* e, uint32_t, size_t) {
  if (i >= gTable.size() || gTable[i].first.empty()) return ENODATA;  // rdma-core: an unused entry
  e->gid = gidOf(gTable[i].first);
  e->gid_index = i;
  e->gid_type = gTable[i].second == 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
  return 0;
}

// The choice under these variables (unset when empty), with the table as it is.
int choose(const std::string& family = "", const std::string& range = "", const std::string& version = "",
           bool sysfs = false, const std::string& root = "") {
  auto set = [](const char* name, const std::string& v) { v.empty() ? unsetenv(name) : setenv(name, v.c_str(), 1); };
  set("NCCL_IB_ADDR_FAMILY", family);
  set("NCCL_IB_ADDR_RANGE", range);
  set("NCCL_IB_ROCE_VERSION_NUM", version);
  reloadConfig();
  Verbs v{};
  v.queryGid = fakeQueryGid;
  v.queryGidEx = sysfs ? nullptr : fakeQueryGidEx;
  ibv_port_attr attr{};
  attr.link_layer = IBV_LINK_LAYER_ETHERNET;
  attr.gid_tbl_len = static_cast<int>(gTable.size());
  int i = chooseGidIndex(v, nullptr, "mlx5_0", 1, attr, root);
  set("NCCL_IB_ADDR_FAMILY", "");
  set("NCCL_IB_ADDR_RANGE", "");
  set("NCCL_IB_ROCE_VERSION_NUM", "");
  reloadConfig();
  return i;
}

const std::vector<std::pair<std::string, int>> kTwoAddresses = {
    {"fe80::ac0:ebff:fe3d:ca54", 1}, {"fe80::ac0:ebff:fe3d:ca54", 2},  // 0, 1: link-local
    {"::ffff:10.110.0.33", 1},       {"::ffff:10.110.0.33", 2},        // 2, 3: the first IPv4 address
    {"", 0},                         {"", 0},                          // 4, 5: unused
    {"::ffff:192.168.7.9", 1},       {"::ffff:192.168.7.9", 2},        // 6, 7: a second (another network)
    {"2001:db8:5::21", 1},           {"2001:db8:5::21", 2},            // 8, 9: a global IPv6 address
};

TEST(GidChoice, TheIpv4AddressOfRoceV2ByDefaultAndV1WhenAsked) {
  gTable = kTwoAddresses;
  EXPECT_EQ(choose(), 3);
  EXPECT_EQ(choose("", "", "1"), 2);
  EXPECT_EQ(choose("AF_INET6"), 9);
  EXPECT_EQ(choose("AF_INET6", "", "1"), 8);
}

TEST(GidChoice, AnAddressRangePicksTheNetwork) {
  gTable = kTwoAddresses;
  EXPECT_EQ(choose("", "192.168.0.0/16"), 7);
  EXPECT_EQ(choose("", "10.110.0.32/30"), 3);
  EXPECT_EQ(choose("", "192.168.7.9/32", "1"), 6);
  EXPECT_EQ(choose("AF_INET6", "2001:db8::/32"), 9);
  EXPECT_EQ(choose("", "172.16.0.0/12"), 0) << "no address in the range: index 0, as NCCL";
  EXPECT_EQ(choose("AF_INET6", "fd00::/8"), 0);
  EXPECT_EQ(choose("", "0.0.0.0/0"), 3) << "a zero-length prefix takes everything";
}

TEST(GidChoice, AMalformedRangeIsIgnored) {
  gTable = kTwoAddresses;
  for (const char* bad : {"192.168.0.0", "192.168.0.0/33", "192.168.0.0/x", "300.1.1.1/8", "2001:db8::/32"})
    EXPECT_EQ(choose("", bad), 3) << bad;  // 2001:db8::/32 is not an AF_INET range
  std::string why;
  parseAddrRange("10.0.0.0/40", AF_INET, &why);
  EXPECT_NE(why.find("prefix length"), std::string::npos) << why;
  why.clear();
  AddrRange r = parseAddrRange("fd00::/8", AF_INET6, &why);
  EXPECT_TRUE(why.empty()) << why;
  EXPECT_EQ(r.prefixLen, 8);
}

TEST(GidChoice, OnlyLinkLocalAddressesOrNothingAssignedGiveIndexZero) {
  gTable = {kTwoAddresses[0], kTwoAddresses[1]};
  EXPECT_EQ(choose(), 0);
  gTable = {{"", 0}, {"", 0}, {"::ffff:10.110.0.33", 2}};
  EXPECT_EQ(choose(), 2);
  EXPECT_EQ(choose("", "", "1"), 2) << "another family replaces the unset entry whatever its version, as NCCL";
}

TEST(GidChoice, AddressesAndFamilies) {
  EXPECT_EQ(gidFamily(gidOf("::ffff:10.0.0.1")), AF_INET);
  EXPECT_EQ(gidFamily(gidOf("ff0e::ffff:239.1.1.1")), AF_INET);
  EXPECT_EQ(gidFamily(gidOf("fe80::1")), AF_INET6);
  EXPECT_EQ(gidFamily(gidOf("2001:db8::1")), AF_INET6);
  EXPECT_FALSE(routableGid(gidOf("::")));
  EXPECT_FALSE(routableGid(gidOf("fe80::")));
  EXPECT_FALSE(routableGid(gidOf("fe80::ac0:ebff:fe3d:ca54")));
  EXPECT_TRUE(routableGid(gidOf("::ffff:10.0.0.1")));
  EXPECT_TRUE(routableGid(gidOf("2001:db8::1")));
  EXPECT_EQ(gidText(gidOf("::ffff:10.110.0.33")), "::ffff:10.110.0.33");
}

// Where rdma-core has no ibv_query_gid_ex (before v34), the versions come from sysfs,
// as NCCL reads them; with no type to read, no version matches.
TEST(GidChoice, VersionsFromSysfsWithoutQueryGidEx) {
  gTable = kTwoAddresses;
  char root[] = "/tmp/strata-sysfs-XXXXXX";
  ASSERT_NE(mkdtemp(root), nullptr);
  EXPECT_EQ(choose("", "", "", true, root), 2) << "the family's first address; no version to prefer";
  std::string types = std::string(root) + "/class/infiniband/mlx5_0/ports/1/gid_attrs/types";
  std::filesystem::create_directories(types);
  for (size_t i = 0; i < gTable.size(); ++i)
    if (!gTable[i].first.empty())
      std::ofstream(types + "/" + std::to_string(i)) << (gTable[i].second == 2 ? "RoCE v2\n" : "IB/RoCE v1\n");
  EXPECT_EQ(roceVersionFromSysfs(root, "mlx5_0", 1, 0), 1);
  EXPECT_EQ(roceVersionFromSysfs(root, "mlx5_0", 1, 3), 2);
  EXPECT_EQ(roceVersionFromSysfs(root, "mlx5_0", 1, 4), -1);
  EXPECT_EQ(choose("", "", "", true, root), 3);
  EXPECT_EQ(choose("", "192.168.0.0/16", "", true, root), 7);
  std::filesystem::remove_all(root);
}

// InfiniBand, as NCCL: the GID at NCCL_IB_ROUTABLE_FLID_GID_INDEX (1) where it carries
// an FLID (bytes 4-5, the LID that routes to the port from other subnets), else 0.
TEST(GidChoice, InfinibandTakesTheRoutableFlidGidWhereThereIsOne) {
  auto chooseIb = [](const std::string& routable) {
    routable.empty() ? unsetenv("NCCL_IB_ROUTABLE_FLID_GID_INDEX")
                     : setenv("NCCL_IB_ROUTABLE_FLID_GID_INDEX", routable.c_str(), 1);
    reloadConfig();
    Verbs v{};
    v.queryGid = fakeQueryGid;
    v.queryGidEx = fakeQueryGidEx;
    ibv_port_attr attr{};
    attr.link_layer = IBV_LINK_LAYER_INFINIBAND;
    attr.gid_tbl_len = static_cast<int>(gTable.size());
    int i = chooseGidIndex(v, nullptr, "mlx5_0", 1, attr, "");
    unsetenv("NCCL_IB_ROUTABLE_FLID_GID_INDEX");
    reloadConfig();
    return i;
  };
  gTable = {{"fe80::248a:703:9c:e6a0", 0}, {"fec0:0:4c01:7:248a:703:9c:e6a0", 0}};
  EXPECT_EQ(chooseIb(""), 1);
  EXPECT_EQ(chooseIb("0"), 0);
  EXPECT_EQ(chooseIb("5"), 0);  // beyond the table
  gTable = {{"fe80::248a:703:9c:e6a0", 0}, {"fe80::7:248a:703:9c:e6a0", 0}};  // no FLID in GID 1
  EXPECT_EQ(chooseIb(""), 0);
}

}  // namespace
}  // namespace strata::transport::ib
