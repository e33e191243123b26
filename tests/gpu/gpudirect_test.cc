// GPUDirect RDMA between nodes, on simulated GPUs (STRATA_GPU_SIM) and the
// user-space verbs device: a send or receive on device buffers of a put's size
// moves as one RDMA write from the sender's GPU memory into the receiver's, through
// each end's registered device buffers (made once, registered through their
// dma-buf; a copy on the GPU at each end; the receive flushed), with no staging
// through host memory and no registration after the first; smaller ones are staged. The emulated NIC maps each
// dma-buf itself, as a real NIC reaches GPU memory over PCIe; a real GPU's dma-buf
// cannot be mapped by the CPU, so this runs on simulated GPUs only.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "device/gpu.h"
#include "harness/ranks.h"
#include "verify/reference.h"
#include "nccl.h"

namespace strata::test {
namespace {

constexpr size_t kSizes[] = {(4u << 20) + 12, 16u << 10, 100};  // two puts (STRATA_PUT_BYTES: 16 KiB), one staged
constexpr int kRounds = 3;

// Byte i of rank's message of `size` in `round` (the reference module's: a chunk at
// the wrong offset does not match).
unsigned char pattern(int rank, size_t size, int round, size_t i) {
  int which = static_cast<int>(std::find(std::begin(kSizes), std::end(kSizes), size) - std::begin(kSizes));
  int tag = (rank * kRounds + round) * static_cast<int>(std::size(kSizes)) + which;
  return static_cast<unsigned char>(verify::movedValue(tag, i, ncclUint8));
}

// Each size: a send to the other rank and a receive from it, on device buffers, checked exactly.
std::string exchange(int rank, int n, const ncclUniqueId& id) {
  device::setCurrentDevice(0);
  void* stream = device::streamCreate();
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
  size_t most = kSizes[0];
  void* src = device::gpuAlloc(most);
  void* dst = device::gpuAlloc(most);
  std::string err;
  int peer = 1 - rank;
  for (int k = 0; err.empty() && k < kRounds * static_cast<int>(std::size(kSizes)); ++k) {
    size_t size = kSizes[k % std::size(kSizes)];
    int round = k / static_cast<int>(std::size(kSizes));
    std::vector<unsigned char> host(size);
    for (size_t i = 0; i < size; ++i) host[i] = pattern(rank, size, round, i);
    device::copySync(src, host.data(), size);
    auto s = static_cast<cudaStream_t>(stream);
    RANK_NCCL(ncclGroupStart());
    RANK_NCCL(ncclSend(src, size, ncclUint8, peer, comm, s));
    RANK_NCCL(ncclRecv(dst, size, ncclUint8, peer, comm, s));
    RANK_NCCL(ncclGroupEnd());
    device::streamSynchronize(stream);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (async != ncclSuccess) err = "asynchronous error " + std::to_string(async) + ": " + ncclGetLastError(comm);
    device::copySync(host.data(), dst, size);
    for (size_t i = 0; err.empty() && i < size; ++i)
      if (host[i] != pattern(peer, size, round, i))
        err = "round " + std::to_string(round) + ": element " + std::to_string(i) + " of " + std::to_string(size) +
              " is " + std::to_string(host[i]) + ", expected " + std::to_string(pattern(peer, size, round, i));
  }
  ncclCommDestroy(comm);
  device::gpuFree(src);
  device::gpuFree(dst);
  device::streamDestroy(stream);
  return err;
}

// Runs exchange() on two ranks as processes on two fake nodes over IB on the
// emulator, each with `env` set too; returns each rank's "NET counters" lines.
std::vector<std::vector<std::string>> exchangeLines(const std::vector<std::pair<std::string, std::string>>& env) {
  char tmpl[] = "/tmp/strata-gpudirect-XXXXXX";
  EXPECT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  auto results = runRanks(Mode::kProcesses, 2, exchange, 120, [dir, env](int rank) {
    useEmulatedIb("gpudirect-node", rank, STRATA_VERBS_EMU_PATH, dir);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    reloadEnvironment();
    return std::string();
  });
  EXPECT_EQ(failures(results), "");
  auto out = counterLines(dir, "ncclSend and 1 more");
  std::filesystem::remove_all(dir);
  return out;
}

#define REQUIRE_SIMULATED_GPU() \
  if (device::gpuCount() == 0 || !getenv("STRATA_GPU_SIM")) GTEST_SKIP() << "runs on simulated GPUs (STRATA_GPU_SIM)"

TEST(GpuDirectRdma, SendRecvBetweenNodesMoveGpuToGpuThroughTheNic) {
  REQUIRE_SIMULATED_GPU();
  auto logs = exchangeLines({});
  ASSERT_EQ(logs.size(), 2u);
  for (const auto& lines : logs) {
    ASSERT_EQ(lines.size(), kRounds * std::size(kSizes)) << "one counters line per send/receive pair";
    for (size_t k = 0; k < lines.size(); ++k) {
      SCOPED_TRACE(lines[k]);
      if (k % std::size(kSizes) == 2) {  // below STRATA_PUT_BYTES: staged through host memory, no GPUDirect
        EXPECT_EQ(lines[k].find("GPUDirect"), std::string::npos);
        continue;
      }
      // The puts: one RDMA write each way, one flush; the device buffers of both ends
      // registered (through their dma-buf) at the first, nothing after.
      EXPECT_EQ(countOf(lines[k], "puts"), 1);
      EXPECT_EQ(countOf(lines[k], "data writes"), 1);
      EXPECT_EQ(countOf(lines[k], "flushes"), 1);
      EXPECT_EQ(countOf(lines[k], "dma-buf registrations"), k == 0 ? 2 : 0);
      if (k > 0) {  // the slots' registrations come with the first
        EXPECT_EQ(countOf(lines[k], "new registrations with the NIC"), 0);
      }
    }
  }
}

// A topology where the GPU (the simulated device 0, 0000:10:00.0) and the NIC hang
// under different CPUs: their path is SYS, farther than NCCL_NET_GDR_LEVEL's PXB,
// so every transfer is staged; NCCL_NET_GDR_LEVEL=SYS allows GPUDirect RDMA again.
TEST(GpuDirectRdma, OffWhenTheGpuIsFartherFromTheNicThanNcclNetGdrLevel) {
  REQUIRE_SIMULATED_GPU();
  char tmpl[] = "/tmp/strata-gpudirect-topo-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string topo = std::string(tmpl) + "/topo.xml";
  const char* cpu = R"(arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85")";
  std::ofstream(topo) << "<system version=\"1\">\n"
                      << "  <cpu numaid=\"0\" affinity=\"0000ffff\" " << cpu << ">\n"
                      << "    <pci busid=\"0000:10:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2330\" "
                         "link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
                      << "      <gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\"/>\n    </pci>\n  </cpu>\n"
                      << "  <cpu numaid=\"1\" affinity=\"ffff0000\" " << cpu << ">\n"
                      << "    <pci busid=\"0000:3b:00.0\" class=\"0x020700\" vendor=\"0x15b3\" device=\"0x101b\" "
                         "link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
                      << "      <nic><net name=\"semu0\" dev=\"0\" speed=\"100000\" port=\"1\" gdr=\"1\"/></nic>\n"
                      << "    </pci>\n  </cpu>\n</system>\n";
  auto off = exchangeLines({{"NCCL_TOPO_FILE", topo}});
  ASSERT_EQ(off.size(), 2u);
  for (const auto& lines : off) {
    ASSERT_EQ(lines.size(), kRounds * std::size(kSizes));
    for (const std::string& line : lines) EXPECT_EQ(line.find("GPUDirect"), std::string::npos) << line;
  }
  auto on = exchangeLines({{"NCCL_TOPO_FILE", topo}, {"NCCL_NET_GDR_LEVEL", "SYS"}});
  ASSERT_EQ(on.size(), 2u);
  for (const auto& lines : on) {
    ASSERT_EQ(lines.size(), kRounds * std::size(kSizes));
    EXPECT_EQ(countOf(lines[0], "dma-buf registrations"), 2) << lines[0];
  }
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace strata::test
