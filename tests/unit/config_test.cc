// The environment parser, the NCCL list syntaxes and the tuner's choice.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "algorithms/tuner.h"
#include "base/conf_file.h"
#include "base/config.h"
#include "base/error.h"
#include "base/socket.h"

namespace strata {
namespace {

Config parse(const std::map<std::string, std::string>& env) {
  return Config::parse([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Config, Defaults) {
  Config c = parse({});
  EXPECT_EQ(c.debugLevel, LogLevel::kNone);
  EXPECT_EQ(c.buffSize, size_t{1} << 20);
  EXPECT_EQ(c.timeoutSec, 300);
  EXPECT_FALSE(c.shmDisable);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Config, ParsesEveryKind) {
  Config c = parse({{"NCCL_DEBUG", "info"}, {"NCCL_DEBUG_SUBSYS", "INIT,COLL"}, {"NCCL_BUFFSIZE", "4M"},
                    {"NCCL_SHM_DISABLE", "1"}, {"STRATA_TIMEOUT", "2.5"}, {"NCCL_MAX_NCHANNELS", "4"},
                    {"NCCL_HOSTID", "node7"}, {"NCCL_ALGO", "^Tree"}, {"STRATA_NSLOTS", "16"}});
  EXPECT_EQ(c.debugLevel, LogLevel::kInfo);
  EXPECT_EQ(c.debugSubsys, kSubsysInit | kSubsysColl);
  EXPECT_EQ(c.buffSize, size_t{4} << 20);
  EXPECT_TRUE(c.shmDisable);
  EXPECT_EQ(c.timeoutSec, 2.5);
  EXPECT_EQ(c.maxChannels, 4);
  EXPECT_EQ(c.hostId, "node7");
  EXPECT_EQ(c.algo, "^Tree");
  EXPECT_EQ(c.slots, 16);
}

TEST(Config, SubsysExclusion) {
  Config c = parse({{"NCCL_DEBUG_SUBSYS", "^INIT"}});
  EXPECT_EQ(c.debugSubsys & kSubsysInit, 0u);
  EXPECT_NE(c.debugSubsys & kSubsysColl, 0u);
}

TEST(Config, BadValuesWarnAndKeepDefaults) {
  Config c = parse({{"NCCL_BUFFSIZE", "lots"}, {"STRATA_TIMEOUT", "-1"}, {"NCCL_DEBUG", "LOUD"},
                    {"NCCL_MIN_NCHANNELS", "8"}, {"NCCL_MAX_NCHANNELS", "2"}});
  EXPECT_EQ(c.buffSize, size_t{1} << 20);
  EXPECT_EQ(c.timeoutSec, 300);
  EXPECT_EQ(c.minChannels, 2);
  ASSERT_EQ(c.warnings.size(), 4u);
  EXPECT_NE(c.warnings[1].find("NCCL_BUFFSIZE"), std::string::npos);
}

TEST(SocketIfname, NcclSyntax) {
  EXPECT_TRUE(interfaceMatches("eth", "eth0"));
  EXPECT_FALSE(interfaceMatches("eth", "ib0"));
  EXPECT_TRUE(interfaceMatches("^docker,lo", "eth0"));
  EXPECT_FALSE(interfaceMatches("^docker,lo", "lo"));
  EXPECT_TRUE(interfaceMatches("=eth0", "eth0"));
  EXPECT_FALSE(interfaceMatches("=eth0", "eth01"));
  EXPECT_TRUE(interfaceMatches("ib,eth", "eth3"));
}

TEST(Tuner, ListSyntax) {
  EXPECT_TRUE(algorithms::listAllows("", "Ring"));
  EXPECT_TRUE(algorithms::listAllows("ring,tree", "Ring"));
  EXPECT_FALSE(algorithms::listAllows("Tree", "Ring"));
  EXPECT_FALSE(algorithms::listAllows("^Ring", "Ring"));
  // Entries scoped to one function override the common list for it only.
  EXPECT_TRUE(algorithms::listAllows("ring;allreduce:oneshot", "OneShot", "AllReduce"));
  EXPECT_FALSE(algorithms::listAllows("ring;allreduce:oneshot", "Ring", "AllReduce"));
  EXPECT_TRUE(algorithms::listAllows("ring;allreduce:oneshot", "Ring", "AllGather"));
  EXPECT_FALSE(algorithms::listAllows("ring;allreduce:oneshot", "OneShot", "AllGather"));
  EXPECT_TRUE(algorithms::listAllows("allreduce:^ll", "Ring", "Broadcast"));
  EXPECT_FALSE(algorithms::listAllows("allreduce:^ll", "LL", "AllReduce"));
}

TEST(Tuner, OneShotForSmallRingForLargeAndEstimatesGrowWithSize) {
  algorithms::TuneRequest r;
  r.nranks = 4;
  r.bytes = 64;
  auto tiny = algorithms::choose(r, "", "");
  EXPECT_STREQ(tiny.name(), "OneShot");
  EXPECT_STREQ(algorithms::protocolName(tiny.proto), "Simple");  // LL needs shared memory
  r.sharedMemory = true;
  tiny = algorithms::choose(r, "", "");
  EXPECT_STREQ(algorithms::protocolName(tiny.proto), "LL");
  EXPECT_STREQ(algorithms::protocolName(algorithms::choose(r, "", "^LL").proto), "Simple");
  EXPECT_STREQ(algorithms::choose(r, "Ring", "").name(), "Ring");
  r.bytes = 1 << 26;
  auto large = algorithms::choose(r, "", "");
  EXPECT_STREQ(large.name(), "Ring");
  EXPECT_STREQ(algorithms::protocolName(large.proto), "Simple");
  EXPECT_LT(tiny.estimatedUs, large.estimatedUs);
}

// Across nodes the network decides: hierarchical moves S per node link where the
// flat ring moves 2(n-1)/n x S, so it wins at large sizes; the tree and one-shot
// need fewer network hops for tiny ones; and a slower network favours it earlier.
TEST(Tuner, MultiNodeChoicesFollowTheNetwork) {
  algorithms::TuneRequest r;
  r.nranks = 8;
  r.nodes = 4;
  r.ranksPerNode = 2;
  r.intra = {1.0, 5.0};
  r.net = {30.0, 0.125};
  r.bytes = 256 << 20;
  EXPECT_STREQ(algorithms::choose(r, "", "").name(), "Hierarchical");
  double hier = algorithms::choose(r, "Hierarchical", "").estimatedUs;
  double ring = algorithms::choose(r, "Ring", "").estimatedUs;
  EXPECT_NEAR(ring / hier, (2.0 * 7 / 8) / (2.0 * 3 / 4), 0.05);  // node-link bytes, ring vs rails
  r.bytes = 8;
  EXPECT_STREQ(algorithms::choose(r, "", "").name(), "Leaders");  // 1 network message per node pair
  EXPECT_STREQ(algorithms::choose(r, "^Leaders", "").name(), "Tree");  // 6 network hops, not the ring's 14
  EXPECT_STREQ(algorithms::protocolName(algorithms::choose(r, "", "").proto), "Simple");  // no LL across hosts
  r.ranksPerNode = 0;  // uneven nodes: no hierarchical
  r.bytes = 256 << 20;
  EXPECT_THROW(algorithms::choose(r, "Hierarchical", ""), Error);
  EXPECT_STREQ(algorithms::choose(r, "", "").name(), "Ring");
}

// DirectRead (processes' one-sided reads) is preferred only below 32 MiB (a constant,
// not STRATA_CMA_BULK_BYTES); above it the ring is chosen, but NCCL_ALGO may still
// force DirectRead, as the stress test does at any size.
TEST(Tuner, DirectReadIsPreferredBelow32MiBAndForcibleAbove) {
  algorithms::TuneRequest r;
  r.coll = algorithms::Collective::kBroadcast;
  r.nranks = 4;
  r.sharedMemory = true;
  r.intra = {1.0, 10.0};
  size_t bulk = 32 << 20;
  r.bytes = bulk - 4096;
  EXPECT_STREQ(algorithms::choose(r, "", "").name(), "DirectRead");
  r.bytes = bulk;
  EXPECT_STREQ(algorithms::choose(r, "", "").name(), "Ring");
  EXPECT_STREQ(algorithms::choose(r, "broadcast:DirectRead", "").name(), "DirectRead");
  EXPECT_STREQ(algorithms::choose(r, "^Ring,Tree", "").name(), "DirectRead");
  r.coll = algorithms::Collective::kAllGather;
  EXPECT_STREQ(algorithms::choose(r, "", "").name(), "Ring");
  EXPECT_STREQ(algorithms::choose(r, "allgather:DirectRead", "").name(), "DirectRead");
  r.coll = algorithms::Collective::kBroadcast;
  r.oneProcess = true;  // threads read each other's memory with plain copies
  EXPECT_STREQ(algorithms::choose(r, "", "").name(), "DirectRead");
}

TEST(Tuner, ExcludingEverythingIsAnError) {
  algorithms::TuneRequest r;
  r.nranks = 2;  // one rank's collective is a copy whatever the lists say
  EXPECT_THROW(algorithms::choose(r, "NVLS", ""), Error);
  EXPECT_THROW(algorithms::choose(r, "Hierarchical", ""), Error);  // one node: it does not apply
  EXPECT_THROW(algorithms::choose(r, "", "LL"), Error);  // no shared memory in the request
  EXPECT_THROW(algorithms::choose(r, "Ring", "LL"), Error);
  r.coll = algorithms::Collective::kAllToAll;  // pairwise is not subject to NCCL_ALGO
  EXPECT_NO_THROW(algorithms::choose(r, "NVLS", ""));
}

// NCCL's configuration files: which are read, their syntax, and which file wins.
TEST(ConfFile, PathsFollowNccl) {
  EXPECT_EQ(confFilePaths("/opt/my.conf", "/home/u"), std::vector<std::string>{"/opt/my.conf"});
  EXPECT_EQ(confFilePaths(nullptr, "/home/u"), (std::vector<std::string>{"/home/u/.nccl.conf", "/etc/nccl.conf"}));
  EXPECT_EQ(confFilePaths("", nullptr), std::vector<std::string>{"/etc/nccl.conf"});
}

TEST(ConfFile, ReadsNameValueLinesAndTheFirstFileWins) {
  std::string user = testing::TempDir() + "strata-user.conf", system = testing::TempDir() + "strata-system.conf";
  std::ofstream(user) << "# a cloud image's settings\nNCCL_SOCKET_IFNAME = eth0  # inline comment\n\n"
                         "NCCL_IB_DISABLE=1\nthis line is not a setting\n";
  std::ofstream(system) << "NCCL_SOCKET_IFNAME=ib0\nNCCL_TOPO_FILE=/etc/topo.xml\n";
  ConfFiles f = readConfFiles({user, "/nonexistent/nccl.conf", system}, false);
  EXPECT_EQ(f.read, (std::vector<std::string>{user, system}));
  EXPECT_EQ(f.values.at("NCCL_SOCKET_IFNAME"), "eth0");  // the user's file over the system's
  EXPECT_EQ(f.values.at("NCCL_IB_DISABLE"), "1");
  EXPECT_EQ(f.values.at("NCCL_TOPO_FILE"), "/etc/topo.xml");
  ASSERT_EQ(f.warnings.size(), 1u);
  EXPECT_NE(f.warnings[0].find(":5: not NAME=VALUE"), std::string::npos) << f.warnings[0];
  EXPECT_TRUE(readConfFiles({"/nonexistent/nccl.conf"}, false).warnings.empty());  // a default that is absent
  EXPECT_EQ(readConfFiles({"/nonexistent/nccl.conf"}, true).warnings.size(), 1u);  // NCCL_CONF_FILE that is
  std::remove(user.c_str());
  std::remove(system.c_str());
}

}  // namespace
}  // namespace strata
