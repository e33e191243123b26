// How a process is configured from outside, through the public API: NCCL's
// configuration files, and NCCL_TOPO_FILE completed by discovery and dumped.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

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

}  // namespace
}  // namespace strata::test
