// Which network device a rank's rail picks (transports/net/rail.cc), over a network
// of the test's own: by name and port, by PCI bus id, by NUMA node, by rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "transports/net/rail.h"

namespace strata::transport::net {
namespace {

// A network that only has devices to describe.
class Devices final : public Network {
 public:
  explicit Devices(std::vector<DeviceProperties> d) : d_(std::move(d)) {}
  const std::string& name() const override { return name_; }
  int devices() override { return static_cast<int>(d_.size()); }
  DeviceProperties properties(int dev) override { return d_[static_cast<size_t>(dev)]; }
  void* listen(int, void*) override { return nullptr; }
  void* connect(int, void*) override { return nullptr; }
  void* accept(void*) override { return nullptr; }
  void* regMr(void*, void*, size_t, int) override { return nullptr; }
  void deregMr(void*, void*) override {}
  void* isend(void*, void*, size_t, int, void*) override { return nullptr; }
  void* irecv(void*, int, const RecvBuffer*) override { return nullptr; }
  bool test(void*, size_t*) override { return false; }
  void closeSend(void*) override {}
  void closeRecv(void*) override {}
  void closeListen(void*) override {}

 private:
  std::string name_ = "TestDevices";
  std::vector<DeviceProperties> d_;
};

DeviceProperties device(const std::string& name, int port, const std::string& pciPath = "") {
  DeviceProperties p;
  p.name = name;
  p.port = port;
  p.pciPath = pciPath;
  return p;
}

PeerInfo rankWithRail(int rank, const char* name, const char* bus, int port, int numa = 0) {
  PeerInfo self;
  self.rank = rank;
  self.numaNode = numa;
  snprintf(self.railName, sizeof self.railName, "%s", name);
  snprintf(self.railBusId, sizeof self.railBusId, "%s", bus);
  self.railPort = port;
  return self;
}

TEST(Rails, ByNameAndPortOfATwoPortHca) {
  Devices net({device("mlx5_0", 1), device("mlx5_0", 2), device("mlx5_1", 1)});
  std::string why;
  EXPECT_EQ(railDevice(net, rankWithRail(0, "mlx5_0", "", 2), &why), 1) << why;
  EXPECT_EQ(railDevice(net, rankWithRail(0, "mlx5_0", "", 1), &why), 0) << why;
  EXPECT_EQ(railDevice(net, rankWithRail(0, "mlx5_1", "", 0), &why), 2) << why;  // no port in the topology: any
  EXPECT_NE(why.find("by name"), std::string::npos) << why;
}

TEST(Rails, ByPciBusIdWhereTheNameDiffers) {
  Devices net({device("rdmap0s1", 1, "/sys/devices/pci0000:00/0000:00:01.0/0000:3b:00.0"),
               device("rdmap0s2", 1, "/sys/devices/pci0000:00/0000:00:02.0/0000:5E:00.0")});
  std::string why;
  EXPECT_EQ(railDevice(net, rankWithRail(0, "mlx5_3", "0000:5e:00.0", 1), &why), 1) << why;  // any case
  EXPECT_NE(why.find("by PCI bus id"), std::string::npos) << why;
}

TEST(Rails, OnTheRanksNumaNodeElseByRank) {
  std::string root = std::filesystem::temp_directory_path() / ("strata-rail-" + std::to_string(getpid()));
  std::vector<DeviceProperties> d;
  for (int i = 0; i < 4; ++i) {
    std::string pci = root + "/dev" + std::to_string(i);
    std::filesystem::create_directories(pci);
    std::ofstream(pci + "/numa_node") << (i % 2) << "\n";  // devices 0, 2 on node 0; 1, 3 on node 1
    d.push_back(device("nic" + std::to_string(i), 1, pci));
  }
  Devices net(d);
  std::string why;
  EXPECT_EQ(railDevice(net, rankWithRail(0, "", "", 0, 1), &why), 1) << why;
  EXPECT_EQ(railDevice(net, rankWithRail(1, "", "", 0, 1), &why), 3) << why;  // the next rank: the next one
  EXPECT_EQ(railDevice(net, rankWithRail(3, "eth0", "", 0, 0), &why), 2) << why;  // a rail that is not one
  EXPECT_NE(why.find("not one of them"), std::string::npos) << why;
  EXPECT_EQ(deviceNumaNode(root + "/nowhere"), -1);
  Devices unplaced({device("a", 1), device("b", 1), device("c", 1)});
  EXPECT_EQ(railDevice(unplaced, rankWithRail(5, "", "", 0), &why), 2) << why;  // rank 5 of 3: by rank
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace strata::transport::net
