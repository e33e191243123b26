// How a process is configured from outside, through the public API: NCCL's
// configuration files, NCCL_TOPO_FILE completed by discovery and dumped, and the
// network between nodes chosen per communicator (ncclConfig_t.netName over NCCL_NET),
// and the settings every rank must share checked at init.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

// NCCL_CONF_FILE is read as NCCL reads it, and the environment wins over it: the
// file turns on INFO logging into a file, and then the environment turns it down.
TEST(Configuration, ConfigurationFileIsReadAndTheEnvironmentWins) {
  std::string conf = testing::TempDir() + "strata-api.conf";
  std::string log = testing::TempDir() + "strata-conf-log.txt";
  std::ofstream(conf) << "# as a cluster image ships it\nNCCL_DEBUG=INFO\nNCCL_DEBUG_FILE=" << log << "\n";
  auto initOnce = [] {
    ncclComm_t comm;
    EXPECT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
    ncclCommDestroy(comm);
  };
  auto slurp = [&log] {
    std::ifstream f(log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  std::remove(log.c_str());
  setenv("NCCL_CONF_FILE", conf.c_str(), 1);
  reloadEnvironment();
  initOnce();
  std::string first = slurp();
  EXPECT_NE(first.find("Read configuration file " + conf), std::string::npos) << first;
  EXPECT_NE(first.find(" INFO "), std::string::npos) << first;
  std::remove(log.c_str());
  setenv("NCCL_DEBUG", "WARN", 1);  // the environment over the file
  reloadEnvironment();
  initOnce();
  std::string second = slurp();
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_CONF_FILE");
  reloadEnvironment();
  EXPECT_EQ(second.find(" INFO "), std::string::npos) << second;
  std::remove(log.c_str());
  std::remove(conf.c_str());
}

// NCCL_SHM_DISABLE follows the environment each time it is reloaded, also in a
// process that has made communicators before (the transport list used to be fixed at
// first use: a reload then changed everything but the transport, and the next pair of
// processes still met over shm).
TEST(Configuration, ShmDisableFollowsAReloadedEnvironment) {
  std::string dir = testing::TempDir() + "strata-shm-disable." + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto viaOfEachRank = [&dir](bool disable) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) std::filesystem::remove(e.path());
    if (disable) setenv("NCCL_SHM_DISABLE", "1", 1);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT", 1);
    setenv("NCCL_DEBUG_FILE", (dir + "/init.%p.log").c_str(), 1);
    reloadEnvironment();
    auto results = runRanks(Mode::kProcesses, 2, allReduceOnce);
    for (const char* name : {"NCCL_SHM_DISABLE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}) unsetenv(name);
    reloadEnvironment();
    EXPECT_EQ(failures(results), "");
    std::vector<std::string> via;
    for (const auto& lines : rankLogs(dir))
      for (const std::string& l : lines)
        if (size_t at = l.find("ring via "); at != std::string::npos) via.push_back(l.substr(at + 9));
    return via;
  };
  ncclComm_t comm;  // this process makes its transports now, shm enabled
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  ncclCommDestroy(comm);
  EXPECT_EQ(viaOfEachRank(true), (std::vector<std::string>{"socket", "socket"}));
  EXPECT_EQ(viaOfEachRank(false), (std::vector<std::string>{"shm", "shm"}));
  std::filesystem::remove_all(dir);
}

// A host with more ranks than cores moves transfers one-sided only from NCCL_BUFFSIZE
// up, unless STRATA_PUT_BYTES says otherwise, and every rank says so (TUNING).
TEST(Configuration, AHostWithMoreRanksThanCoresMovesOneSidedFromTheStagingSize) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 7) GTEST_SKIP() << "needs more ranks than cores; this host has " << cores;
  const int n = static_cast<int>(cores) + 1;
  std::string dir = testing::TempDir() + "strata-crowded." + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto ranksThatSaySo = [&](const char* putBytes) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) std::filesystem::remove(e.path());
    if (putBytes) setenv("STRATA_PUT_BYTES", putBytes, 1);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
    setenv("NCCL_DEBUG_FILE", (dir + "/tuning.%p.log").c_str(), 1);
    reloadEnvironment();
    auto results = runRanks(Mode::kProcesses, n, allReduceOnce);
    for (const char* name : {"STRATA_PUT_BYTES", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}) unsetenv(name);
    reloadEnvironment();
    EXPECT_EQ(failures(results), "");
    int said = 0;
    for (const auto& lines : rankLogs(dir))
      for (const std::string& l : lines) said += l.find("transfers move one-sided from 1048576 bytes") != std::string::npos;
    return said;
  };
  EXPECT_EQ(ranksThatSaySo(nullptr), n);
  EXPECT_EQ(ranksThatSaySo("16384"), 0);  // as given, even at the default's value
  std::filesystem::remove_all(dir);
}

// NCCL_TOPO_FILE is a base that discovery completes, and NCCL_TOPO_DUMP_FILE writes
// the result: a PCI-only file's bare GPUs that this machine's discovery does not find
// (none here) are left out of what the communicator plans with, and of the dump.
TEST(Configuration, TopologyFileIsCompletedByDiscoveryAndDumped) {
  std::string file = testing::TempDir() + "strata-pci-only.xml", dump = testing::TempDir() + "strata-dump.xml";
  std::ofstream(file) << R"(<system version="1">
  <cpu numaid="0" affinity="ffffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:07:00.0" class="0x060400" vendor="0x1000" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:08:00.0" class="0x030200" vendor="0x10de" link_speed="32.0 GT/s PCIe" link_width="16"/>
    </pci>
  </cpu>
</system>
)";
  std::remove(dump.c_str());
  setenv("NCCL_TOPO_FILE", file.c_str(), 1);
  setenv("NCCL_TOPO_DUMP_FILE", dump.c_str(), 1);
  reloadEnvironment();
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitAll(&comm, 1, nullptr);
  if (r == ncclSuccess) ncclCommDestroy(comm);
  unsetenv("NCCL_TOPO_FILE");
  unsetenv("NCCL_TOPO_DUMP_FILE");
  reloadEnvironment();
  ASSERT_EQ(r, ncclSuccess) << ncclGetLastError(nullptr);
  std::ifstream f(dump);
  std::string xml((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(xml.find("0000:07:00.0"), std::string::npos) << xml;  // the file's PCI tree
  EXPECT_EQ(xml.find("0000:08:00.0"), std::string::npos) << xml;  // its GPU, which nothing here describes
  std::remove(file.c_str());
  std::remove(dump.c_str());
}

// Ranks as processes on two fake nodes (NCCL_HOSTID) over loopback; `net` is NCCL_NET
// ("" unset) and `netName(rank)` the communicator's ncclConfig_t.netName (null: none).
// Returns each rank's error ("" for success), or the init's code and message.
std::vector<RankResult> onTwoNodes(int nranks, const char* net, const char* (*netName)(int rank)) {
  return runRanks(
      Mode::kProcesses, nranks,
      [netName](int rank, int n, const ncclUniqueId& id) -> std::string {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.netName = netName(rank);
        ncclComm_t comm;
        ncclResult_t r = ncclCommInitRankConfig(&comm, n, id, rank, &cfg);
        if (r != ncclSuccess) return "init " + std::to_string(r) + ": " + ncclGetLastError(nullptr);
        int v = rank + 1, sum = 0;
        RANK_NCCL(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, comm, nullptr));
        if (sum != n * (n + 1) / 2) return "wrong sum " + std::to_string(sum);
        ncclComm_t child;  // a split inherits the parent's network
        RANK_NCCL(ncclCommSplit(comm, 0, rank, &child, nullptr));
        RANK_NCCL(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, child, nullptr));
        ncclCommDestroy(child);
        ncclCommDestroy(comm);
        return sum == n * (n + 1) / 2 ? "" : "wrong sum on the split";
      },
      120,
      [net](int rank) {
        setenv("NCCL_HOSTID", rank % 2 ? "net-name-node1" : "net-name-node0", 1);
        setenv("NCCL_SOCKET_IFNAME", "lo", 1);
        if (*net) setenv("NCCL_NET", net, 1);
        reloadEnvironment();  // this process may have read its environment before (an earlier test)
        return std::string();
      });
}

// NCCL_NET names a network this process lacks, but each communicator asks for TCP
// (by NCCL's name, in any case): it connects, and so does its split.
TEST(NetName, TheCommunicatorsNetNameWinsOverNcclNet) {
  auto results = onTwoNodes(4, "NoSuchNetwork", [](int) -> const char* { return "socket"; });
  EXPECT_EQ(failures(results), "");
}

// A name no loaded network has fails the init with ncclInvalidUsage, naming it and
// the networks there are.
TEST(NetName, AnUnknownNetworkFailsInitNamingIt) {
  auto results = onTwoNodes(2, "", [](int) -> const char* { return "NoSuchNetwork"; });
  for (const RankResult& r : results) {
    EXPECT_NE(r.error.find("init " + std::to_string(ncclInvalidUsage)), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("\"NoSuchNetwork\""), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("Socket"), std::string::npos) << r.error;  // what this process has
  }
}

// Ranks that ask for different networks would speak different protocols on one
// connection: every rank's init fails, naming the two.
TEST(NetName, RanksThatDisagreeFailAlike) {
  auto results = onTwoNodes(2, "", [](int rank) -> const char* { return rank == 0 ? "Socket" : nullptr; });
  for (const RankResult& r : results) {
    EXPECT_NE(r.error.find("init " + std::to_string(ncclInvalidUsage)), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("disagree on the network"), std::string::npos) << r.error;
  }
}


// Ranks as processes; rank r's environment gets `env(r)` ("NAME=value;NAME=value", ""
// for nothing) and, with `twoNodes`, NCCL_HOSTID puts odd ranks on a second node.
// Each rank inits, all-reduces and destroys; returns each rank's error ("" for success).
std::vector<RankResult> withRankEnv(int nranks, bool twoNodes, std::string (*env)(int rank)) {
  return runRanks(
      Mode::kProcesses, nranks,
      [](int rank, int n, const ncclUniqueId& id) -> std::string {
        ncclComm_t comm;
        ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
        if (r != ncclSuccess) return "init " + std::to_string(r) + ": " + ncclGetLastError(nullptr);
        int v = rank + 1, sum = 0;
        RANK_NCCL(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, comm, nullptr));
        ncclCommDestroy(comm);
        return sum == n * (n + 1) / 2 ? "" : "wrong sum " + std::to_string(sum);
      },
      120,
      [twoNodes, env](int rank) {
        if (twoNodes) setenv("NCCL_HOSTID", rank % 2 ? "agree-node1" : "agree-node0", 1);
        setenv("NCCL_SOCKET_IFNAME", "lo", 1);
        std::string all = env(rank);
        for (size_t at = 0; at < all.size();) {
          size_t end = std::min(all.find(';', at), all.size()), eq = all.find('=', at);
          setenv(all.substr(at, eq - at).c_str(), all.substr(eq + 1, end - eq - 1).c_str(), 1);
          at = end + 1;
        }
        reloadEnvironment();
        return std::string();
      });
}

void expectAllFailNaming(const std::vector<RankResult>& results, const std::string& what) {
  for (const RankResult& r : results) {
    EXPECT_NE(r.error.find("init " + std::to_string(ncclInvalidUsage)), std::string::npos) << r.error;
    EXPECT_NE(r.error.find(what), std::string::npos) << r.error;
  }
}

// One rank restricted to another algorithm would plan another exchange, and both
// would wait until STRATA_TIMEOUT: every rank's init fails instead, naming the setting
// and the two ranks.
TEST(SettingsAgreement, RanksWithDifferentAlgorithmsFailInitAlike) {
  auto results = withRankEnv(3, false, [](int rank) -> std::string {
    return rank == 2 ? "NCCL_ALGO=allreduce:tree" : "NCCL_ALGO=allreduce:ring";
  });
  expectAllFailNaming(results, "ranks 0 and 2 differ in NCCL_ALGO");
}

TEST(SettingsAgreement, DifferentStagingOrChannelsFailInit) {
  expectAllFailNaming(withRankEnv(2, false, [](int rank) -> std::string { return rank ? "NCCL_BUFFSIZE=2097152" : ""; }),
                      "differ in the slots (NCCL_BUFFSIZE / STRATA_NSLOTS)");
  expectAllFailNaming(withRankEnv(2, false, [](int rank) -> std::string { return rank ? "NCCL_MAX_NCHANNELS=1" : ""; }),
                      "differ in the channel count");
  expectAllFailNaming(withRankEnv(2, false, [](int rank) -> std::string { return rank ? "STRATA_CMA_BULK_BYTES=4096" : ""; }),
                      "differ in STRATA_CMA_BULK_BYTES");
}

// Settings that plan alike agree: NCCL's lists with other case and spaces, and
// staging sizes that make the same slots (8 x 128 KiB, 64-byte aligned).
TEST(SettingsAgreement, SettingsThatPlanAlikeAgree) {
  auto results = withRankEnv(2, false, [](int rank) -> std::string {
    return rank ? "NCCL_ALGO=Ring, Tree;NCCL_PROTO=simple;NCCL_BUFFSIZE=1048600"
                : "NCCL_ALGO=ring,tree;NCCL_PROTO=Simple;NCCL_BUFFSIZE=1048576";
  });
  EXPECT_EQ(failures(results), "");
}

// A ring's rank asks whether every hop, on every host, can write one-sided, answering
// for other hosts from its own NCCL_SHM_DISABLE: it must be alike on every node.
// GPU peer-to-peer settings play no part on host memory: there they may differ.
TEST(SettingsAgreement, ShmMustAgreeEverywhereGpuPeerToPeerNotOnHostMemory) {
  expectAllFailNaming(withRankEnv(4, true, [](int rank) -> std::string { return rank % 2 ? "NCCL_SHM_DISABLE=1" : ""; }),
                      "ranks 0 and 1 differ in NCCL_SHM_DISABLE");
  EXPECT_EQ(failures(withRankEnv(2, false, [](int rank) -> std::string {
              return rank ? "NCCL_P2P_LEVEL=SYS;NCCL_P2P_DISABLE=1" : "";
            })),
            "");
}

// Two ranks (threads) under NCCL_ALGO / NCCL_PROTO: an all-reduce of {rank + 1,
// 10 rank + 3} and a reduce-scatter of the same, each rank saying what it got
// ("sum 3 16", "rs 3" or "rs 16") or the call's error.
std::vector<std::string> underSettings(const char* algo, const char* proto) {
  algo ? setenv("NCCL_ALGO", algo, 1) : unsetenv("NCCL_ALGO");
  proto ? setenv("NCCL_PROTO", proto, 1) : unsetenv("NCCL_PROTO");
  reloadEnvironment();
  auto results = runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return "init failed: " + std::string(ncclGetLastError(nullptr));
    float a[2] = {static_cast<float>(rank + 1), static_cast<float>(10 * rank + 3)}, b[2] = {0, 0}, rs = 0;
    std::string got;
    if (ncclAllReduce(a, b, 2, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess)
      got = "sum " + std::to_string(static_cast<int>(b[0])) + " " + std::to_string(static_cast<int>(b[1]));
    else
      got = "all-reduce: " + std::string(ncclGetLastError(nullptr));
    if (ncclReduceScatter(a, &rs, 1, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess)
      got += "; rs " + std::to_string(static_cast<int>(rs));
    else
      got += "; reduce-scatter: " + std::string(ncclGetLastError(nullptr));
    ncclCommDestroy(comm);
    return got;
  }, 60);
  unsetenv("NCCL_ALGO");
  unsetenv("NCCL_PROTO");
  reloadEnvironment();
  std::vector<std::string> out;
  for (const RankResult& r : results) out.push_back(r.error);
  return out;
}

TEST(Api, AlgorithmListsAreHonoured) {
  std::vector<std::string> got = underSettings("NVLS", nullptr);
  ASSERT_EQ(got.size(), 2u);
  for (const std::string& g : got) {
    EXPECT_NE(g.find("all-reduce: "), std::string::npos) << g;
    EXPECT_NE(g.find("NCCL_ALGO=NVLS leaves no algorithm for AllReduce"), std::string::npos) << g;
    EXPECT_NE(g.find("this build has Ring, Tree, OneShot for it"), std::string::npos) << g;
  }
  EXPECT_EQ(underSettings("^Tree", nullptr), (std::vector<std::string>{"sum 3 16; rs 3", "sum 3 16; rs 16"}));
  // NCCL_PROTO=LL as a job tuned for NCCL sets it: every collective keeps an algorithm
  // (one-shot over LL); LL128, a GPU protocol, leaves host memory none, saying why.
  EXPECT_EQ(underSettings(nullptr, "LL"), (std::vector<std::string>{"sum 3 16; rs 3", "sum 3 16; rs 16"}));
  got = underSettings(nullptr, "LL128");
  ASSERT_EQ(got.size(), 2u);
  for (const std::string& g : got) EXPECT_NE(g.find("LL128 is a GPU protocol"), std::string::npos) << g;
}

// One rank's collective is a copy whatever NCCL_ALGO and NCCL_PROTO say, as in NCCL
// (which runs it without choosing an algorithm).
TEST(Api, OneRankIgnoresTheAlgorithmLists) {
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  float a[2] = {5, 7}, b[2] = {0, 0};
  for (const char* algo : {"NVLS", "^Ring,Tree,OneShot,DirectRead"}) {
    setenv("NCCL_ALGO", algo, 1);
    setenv("NCCL_PROTO", "LL128", 1);
    reloadEnvironment();
    EXPECT_EQ(ncclAllReduce(a, b, 2, ncclFloat, ncclSum, comm, nullptr), ncclSuccess) << algo << ": " << std::string(ncclGetLastError(nullptr));
    EXPECT_EQ(b[0], 5);
    EXPECT_EQ(b[1], 7);
    b[0] = b[1] = 0;
  }
  unsetenv("NCCL_ALGO");
  unsetenv("NCCL_PROTO");
  reloadEnvironment();
  ncclCommDestroy(comm);
}

}  // namespace
}  // namespace strata::test
