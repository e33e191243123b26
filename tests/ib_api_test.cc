// The IB network through the public API, on the user-space verbs device: the
// per-operation NET counters (NCCL_DEBUG_SUBSYS=NET) that show what each
// operation cost on the wire, which device each rank's rail picks (sysfs and
// topology files of the tests' own), and forks during transfers.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.h"
#include "verify/reference.h"

namespace strata::test {
namespace {

// A fresh folder for the ranks' NCCL_DEBUG_FILEs.
std::string scratchDir() {
  char dir[] = "/tmp/strata-ib-api-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  return dir;
}

// Ranks as processes, rank k on fake node k % nodes (default: one rank a node), over
// IB on the emulator; each logs NET lines to dir/net.<pid>.log. `extraEnv` runs in
// each rank before anything.
std::vector<RankResult> onFakeNodes(int nranks, const std::string& dir, const RankFn& fn,
                                    const std::function<void(int)>& extraEnv = {}, int nodes = 0) {
  return runRanks(Mode::kProcesses, nranks, fn, 120, [dir, extraEnv, nodes, nranks](int rank) {
    useEmulatedIb("ib-api-node", rank % (nodes ? nodes : nranks), STRATA_VERBS_EMU_PATH, dir);
    if (extraEnv) extraEnv(rank);
    reloadEnvironment();
    return std::string();
  });
}

// A steady all-reduce loop between nodes registers nothing after its first
// operation (the slots are registered once, when the connections come up), and
// every operation moves messages.
TEST(IbCounters, SteadyAllReduceRegistersNothingAfterTheFirstOperation) {
  std::string dir = scratchDir();
  constexpr int kIters = 6;
  constexpr size_t kCount = 256 * 1024;  // 1 MiB of floats
  auto results = onFakeNodes(2, dir, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    std::vector<float> in(kCount), out(kCount);
    for (int it = 0; it < kIters; ++it) {
      for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>((i % 97) + rank + it);
      RANK_NCCL(ncclAllReduce(in.data(), out.data(), kCount, ncclFloat, ncclSum, comm, nullptr));
      for (size_t i = 0; i < kCount; ++i)
        if (out[i] != static_cast<float>(2 * (i % 97) + 1 + 2 * it)) return "wrong sum at " + std::to_string(i);
    }
    ncclCommDestroy(comm);
    return "";
  });
  ASSERT_EQ(failures(results), "");
  auto files = counterLines(dir, "ncclAllReduce:");
  ASSERT_EQ(files.size(), 2u);
  for (const auto& lines : files) {
    ASSERT_EQ(lines.size(), static_cast<size_t>(kIters)) << "one counters line per all-reduce";
    EXPECT_GT(countOf(lines[0], "registrations"), 0) << lines[0];  // the slots, as the connections come up
    for (int it = 1; it < kIters; ++it) {
      SCOPED_TRACE(lines[it]);
      EXPECT_GT(countOf(lines[it], "messages"), 0);
      EXPECT_EQ(countOf(lines[it], "registrations"), 0);
      EXPECT_EQ(countOf(lines[it], "new registrations with the NIC"), 0);
    }
  }
  std::filesystem::remove_all(dir);
}

// Byte i of message `tag` (the reference module's: a chunk at the wrong offset does not match).
unsigned char byteOf(int tag, size_t i) {
  return static_cast<unsigned char>(verify::movedValue(tag, i, ncclUint8));
}

// Puts of memory nobody registered go through the library's registered buffers: a
// steady loop of sends, receives and all-gathers on buffers allocated afresh each
// iteration (malloc maps and unmaps them: a registration kept for such memory would
// later point at pages the process no longer uses) registers nothing with the NIC
// after its first iteration, and every result is exact. Three ranks on three nodes,
// data unique per rank, position and iteration.
TEST(IbCounters, UnregisteredBuffersRegisterNothingAfterTheFirstOperation) {
  std::string dir = scratchDir();
  constexpr int kIters = 5, kRanks = 3;
  static constexpr size_t kBytes = (1u << 20) + 12, kPiece = (512u << 10) / 4 + 3;  // floats a rank, all-gather
  auto results = onFakeNodes(kRanks, dir, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    for (int it = 0; it < kIters; ++it) {
      auto send = std::make_unique<std::vector<unsigned char>>(kBytes);
      auto recv = std::make_unique<std::vector<unsigned char>>(kBytes, 0);
      for (size_t i = 0; i < kBytes; ++i) (*send)[i] = byteOf(rank * kIters + it, i);
      RANK_NCCL(ncclGroupStart());
      RANK_NCCL(ncclSend(send->data(), kBytes, ncclUint8, next, comm, nullptr));
      RANK_NCCL(ncclRecv(recv->data(), kBytes, ncclUint8, prev, comm, nullptr));
      RANK_NCCL(ncclGroupEnd());
      for (size_t i = 0; i < kBytes; ++i) {
        unsigned char want = byteOf(prev * kIters + it, i);
        if ((*recv)[i] != want)
          return "iteration " + std::to_string(it) + ", from rank " + std::to_string(prev) + ": element " +
                 std::to_string(i) + " of " + std::to_string(kBytes) + " is " + std::to_string((*recv)[i]) +
                 ", expected " + std::to_string(want);
      }
      auto mine = std::make_unique<std::vector<float>>(kPiece);
      auto all = std::make_unique<std::vector<float>>(kPiece * n, -1.0f);
      for (size_t i = 0; i < kPiece; ++i) (*mine)[i] = static_cast<float>(i + rank * 200000 + it * 17);
      RANK_NCCL(ncclAllGather(mine->data(), all->data(), kPiece, ncclFloat, comm, nullptr));
      for (size_t k = 0; k < kPiece * n; ++k) {
        float want = static_cast<float>(k % kPiece + k / kPiece * 200000 + it * 17);  // exact: below 2^24
        if ((*all)[k] != want)
          return "iteration " + std::to_string(it) + ", all-gather: element " + std::to_string(k) + " of " +
                 std::to_string(kPiece * n) + " is " + std::to_string((*all)[k]) + ", expected " +
                 std::to_string(want);
      }
    }
    ncclCommDestroy(comm);
    return "";
  });
  ASSERT_EQ(failures(results), "");
  for (const char* fn : {"ncclSend and 1 more operations of the group:", "ncclAllGather:"}) {
    auto files = counterLines(dir, fn);
    ASSERT_EQ(files.size(), static_cast<size_t>(kRanks)) << fn;
    for (const auto& lines : files) {
      ASSERT_EQ(lines.size(), static_cast<size_t>(kIters)) << fn;
      for (int it = 1; it < kIters; ++it) {
        SCOPED_TRACE(lines[it]);
        EXPECT_GT(countOf(lines[it], "puts"), 0);
        EXPECT_NE(lines[it].find("copied through registered buffers"), std::string::npos);
        EXPECT_EQ(countOf(lines[it], "registrations"), 0);
        EXPECT_EQ(countOf(lines[it], "new registrations with the NIC"), 0);
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// Children forked while transfers are in flight (DataLoader workers, subprocesses)
// change nothing: ibv_fork_init ran before the first registration, so every registered
// page is kept out of the children (MADV_DONTFORK), and the library's registered
// buffers are pages of their own. The emulator models copy-on-write at its worst:
// after a fork, an unprotected region's bytes are the NIC's snapshot, out of the
// process's sight (without the protection the ranks' FIFOs go stale and they wait
// until STRATA_TIMEOUT). All-reduces through the slots and one-sided puts, data unique
// per rank, position and iteration.
TEST(IbFork, ChildrenForkedDuringTransfersChangeNothing) {
  std::string dir = scratchDir();
  auto results = onFakeNodes(
      2, dir,
      [](int rank, int n, const ncclUniqueId& id) -> std::string {
        ncclComm_t comm;
        RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
        std::atomic<bool> done{false};
        std::atomic<int> forks{0};
        std::thread forker([&] {
          while (!done.load()) {
            pid_t pid = fork();
            if (pid == 0) _exit(0);  // a child that only exits
            if (pid > 0) waitpid(pid, nullptr, 0), forks.fetch_add(1);
            usleep(2000);
          }
        });
        std::string err;
        for (int it = 0; it < 12 && err.empty(); ++it) {
          size_t count = it % 2 ? (3u << 20) / 8 + 5 : 1031;  // puts (3 MiB), and the slots
          std::vector<int64_t> in(count), out(count, -1);
          auto value = [&](int r, size_t i) {
            return static_cast<int64_t>(r) * 1000003 + static_cast<int64_t>(i) * 7 + it * 100000007ll;
          };
          for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
          ncclResult_t rc = ncclAllReduce(in.data(), out.data(), count, ncclInt64, ncclSum, comm, nullptr);
          if (rc != ncclSuccess) err = ncclFailure("ncclAllReduce", rc);
          for (size_t i = 0; i < count && err.empty(); ++i)
            if (out[i] != value(0, i) + value(1, i))
              err = "iteration " + std::to_string(it) + ": element " + std::to_string(i) + " of " +
                    std::to_string(count) + " is " + std::to_string(out[i]) + ", expected " +
                    std::to_string(value(0, i) + value(1, i));
        }
        done.store(true);
        forker.join();
        if (err.empty() && forks.load() == 0) err = "no child was forked";
        void* emu = dlopen(STRATA_VERBS_EMU_PATH, RTLD_NOW | RTLD_NOLOAD);
        auto safe = emu ? reinterpret_cast<int (*)()>(dlsym(emu, "strata_verbs_emu_fork_safe")) : nullptr;
        if (err.empty() && (!safe || !safe())) err = "ibv_fork_init was not called";
        ncclCommDestroy(comm);
        return err;
      },
      [](int) { setenv("STRATA_TIMEOUT", "20", 1); });
  EXPECT_EQ(failures(results), "");
  std::filesystem::remove_all(dir);
}

// NCCL_IB_GID_INDEX naming an index the port has no address at (the emulator's ports
// have two GIDs): the port is dropped with a warning that names it, the index and the
// variable, and with NCCL_NET=IB init then fails naming the network, instead of the
// NIC vanishing without a word.
TEST(IbGid, AGidIndexWithNoAddressDropsThePortWithAWarning) {
  std::string dir = scratchDir();
  auto results = onFakeNodes(
      2, dir,
      [](int rank, int n, const ncclUniqueId& id) -> std::string {
        ncclComm_t comm = nullptr;
        ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
        std::string why = ncclGetLastError(comm);
        if (comm) ncclCommDestroy(comm);
        if (r == ncclSuccess) return "init succeeded without a usable IB port";
        if (why.find("IB") == std::string::npos) return "init failed without naming IB: " + why;
        return std::string();
      },
      [](int) { setenv("NCCL_IB_GID_INDEX", "7", 1); });
  EXPECT_EQ(failures(results), "");
  std::vector<std::vector<std::string>> logs = rankLogs(dir);
  EXPECT_EQ(logs.size(), 2u);
  for (const auto& lines : logs) {
    bool said = std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("has no GID at index 7 (NCCL_IB_GID_INDEX=7): the port is not used") != std::string::npos;
    });
    EXPECT_TRUE(said) << testing::PrintToString(lines);
  }
  std::filesystem::remove_all(dir);
}

// A large message to a buffer the user registered (ncclCommRegister) moves as one
// RDMA write from the sender's buffer straight into the receiver's: one put, one
// data write, and no registration with the NIC, after the first operation.
TEST(IbCounters, LargeSendIsOneRdmaWriteIntoTheReceiversBuffer) {
  std::string dir = scratchDir();
  constexpr int kIters = 5;
  constexpr size_t kBytes = 16u << 20;
  auto results = onFakeNodes(2, dir, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    void *sendBuf = nullptr, *recvBuf = nullptr, *sh = nullptr, *rh = nullptr;
    RANK_NCCL(ncclMemAlloc(&sendBuf, kBytes));
    RANK_NCCL(ncclMemAlloc(&recvBuf, kBytes));
    RANK_NCCL(ncclCommRegister(comm, sendBuf, kBytes, &sh));
    RANK_NCCL(ncclCommRegister(comm, recvBuf, kBytes, &rh));
    auto* s = static_cast<unsigned char*>(sendBuf);
    auto* r = static_cast<unsigned char*>(recvBuf);
    int peer = 1 - rank;
    for (int it = 0; it < kIters; ++it) {
      for (size_t i = 0; i < kBytes; ++i) s[i] = static_cast<unsigned char>(i * 7 + rank + it);
      RANK_NCCL(ncclGroupStart());
      RANK_NCCL(ncclSend(sendBuf, kBytes, ncclUint8, peer, comm, nullptr));
      RANK_NCCL(ncclRecv(recvBuf, kBytes, ncclUint8, peer, comm, nullptr));
      RANK_NCCL(ncclGroupEnd());
      for (size_t i = 0; i < kBytes; ++i)
        if (r[i] != static_cast<unsigned char>(i * 7 + peer + it)) return "wrong byte at " + std::to_string(i);
    }
    ncclCommDeregister(comm, sh);
    ncclCommDeregister(comm, rh);
    ncclCommDestroy(comm);
    ncclMemFree(sendBuf);
    ncclMemFree(recvBuf);
    return "";
  });
  ASSERT_EQ(failures(results), "");
  auto files = counterLines(dir, "ncclSend and 1 more operations of the group:");
  ASSERT_EQ(files.size(), 2u);
  for (const auto& lines : files) {
    ASSERT_EQ(lines.size(), static_cast<size_t>(kIters));
    for (int it = 1; it < kIters; ++it) {
      SCOPED_TRACE(lines[it]);
      EXPECT_EQ(countOf(lines[it], "puts"), 1);
      EXPECT_EQ(countOf(lines[it], "data writes"), 1);
      EXPECT_EQ(countOf(lines[it], "new registrations with the NIC"), 0);
      EXPECT_EQ(countOf(lines[it], "messages \\(0 B\\) through the slots"), 0);
    }
  }
  std::filesystem::remove_all(dir);
}

// Point-to-point receives from one peer in one group post as one grouped receive:
// eight ncclRecv of one-sided writes cost the receiver one FIFO write, and the
// sender one data write each plus the one that completes the group.
TEST(IbCounters, ReceivesFromOnePeerInAGroupAreOneGroupedReceive) {
  std::string dir = scratchDir();
  constexpr int kIters = 4, kMsgs = 8;
  constexpr size_t kBytes = 64 * 1024 + 12;
  auto results = onFakeNodes(2, dir, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    std::vector<std::vector<unsigned char>> buf(kMsgs, std::vector<unsigned char>(kBytes + 7 * kMsgs));
    for (int it = 0; it < kIters; ++it) {
      RANK_NCCL(ncclGroupStart());
      for (int m = 0; m < kMsgs; ++m) {
        size_t bytes = kBytes + 7 * m;  // each its own size: a swap would show
        if (rank == 1) {
          for (size_t i = 0; i < bytes; ++i) buf[m][i] = static_cast<unsigned char>(i * 5 + m * 11 + it);
          RANK_NCCL(ncclSend(buf[m].data(), bytes, ncclUint8, 0, comm, nullptr));
        } else {
          RANK_NCCL(ncclRecv(buf[m].data(), bytes, ncclUint8, 1, comm, nullptr));
        }
      }
      RANK_NCCL(ncclGroupEnd());
      for (int m = 0; rank == 0 && m < kMsgs; ++m)
        for (size_t i = 0; i < kBytes + 7 * m; ++i)
          if (buf[m][i] != static_cast<unsigned char>(i * 5 + m * 11 + it))
            return "message " + std::to_string(m) + ": wrong byte at " + std::to_string(i);
    }
    ncclCommDestroy(comm);
    return "";
  });
  ASSERT_EQ(failures(results), "");
  auto recvs = counterLines(dir, "ncclRecv and 7 more operations of the group:");
  auto sends = counterLines(dir, "ncclSend and 7 more operations of the group:");
  auto ofOneRank = [](const std::vector<std::vector<std::string>>& files) {  // the rank whose log has them
    std::vector<std::string> lines;
    for (const auto& f : files) lines.insert(lines.end(), f.begin(), f.end());
    return lines;
  };
  std::vector<std::string> recv = ofOneRank(recvs), send = ofOneRank(sends);
  ASSERT_EQ(recv.size(), static_cast<size_t>(kIters));
  ASSERT_EQ(send.size(), static_cast<size_t>(kIters));
  for (int it = 1; it < kIters; ++it) {  // the first also brings the connections up
    EXPECT_EQ(countOf(recv[it], "FIFO writes"), 1) << recv[it];
    EXPECT_EQ(countOf(send[it], "puts"), kMsgs) << send[it];
    EXPECT_EQ(countOf(send[it], "data writes"), kMsgs + 1) << send[it];
  }
  std::filesystem::remove_all(dir);
}

// A sysfs tree as the kernel lays it out for two RDMA devices: semu0 at PCI
// 0000:3b:00.0 on NUMA node `numa0`, semu1 at 0000:5e:00.0 on NUMA node `numa1`.
void fakeSysfs(const std::string& root, int numa0, int numa1) {
  const char* bus[2] = {"0000:3b:00.0", "0000:5e:00.0"};
  int numa[2] = {numa0, numa1};
  for (int d = 0; d < 2; ++d) {
    std::string pci = root + "/devices/pci0000:00/" + bus[d];
    std::string cls = root + "/class/infiniband/semu" + std::to_string(d);
    std::filesystem::create_directories(pci);
    std::filesystem::create_directories(cls);
    std::ofstream(pci + "/numa_node") << numa[d] << "\n";
    ASSERT_EQ(symlink(pci.c_str(), (cls + "/device").c_str()), 0);
  }
}

// A topology file with one CPU (NUMA 0, where this machine's ranks run) and one
// NIC under it: its port's name and its PCI bus id.
std::string topologyWithNic(const std::string& dir, const std::string& name, const std::string& bus) {
  std::string path = dir + "/topo.xml";
  std::ofstream(path) << "<system version=\"1\">\n"
                         "  <cpu numaid=\"0\" affinity=\"ffffffff\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
                         "familyid=\"6\" modelid=\"85\">\n"
                         "    <pci busid=\"" << bus << "\" class=\"0x020700\" vendor=\"0x15b3\" device=\"0x101b\" "
                         "link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n"
                         "      <nic><net name=\"" << name << "\" dev=\"0\" speed=\"100000\" port=\"1\" gdr=\"0\"/></nic>\n"
                         "    </pci>\n  </cpu>\n</system>\n";
  return path;
}

// The device each rank's connections used: "semuN" from its "uses device" lines
// (every line of a rank must agree); one entry per rank's log.
std::vector<std::string> devicesUsed(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& lines : rankLogs(dir)) {
    std::string used;
    for (const std::string& line : lines) {
      std::smatch m;
      if (!std::regex_search(line, m, std::regex("uses device \\d+ \\((semu\\d)\\): (.*)"))) continue;
      if (used.empty()) used = m[1];
      if (used != m[1]) used = "both " + used + " and " + std::string(m[1]);
    }
    out.push_back(used);
  }
  return out;
}

// An all-reduce between two fake nodes, each with the two devices of fakeSysfs;
// returns the device each rank used.
std::vector<std::string> railsOfARun(const std::string& dir, int numa0, int numa1, const std::string& topo) {
  fakeSysfs(dir + "/sys", numa0, numa1);
  auto results = onFakeNodes(
      2, dir,
      allReduceOnce,
      [dir, topo](int) {
        setenv("STRATA_VERBS_EMU_DEVICES", "2", 1);
        setenv("STRATA_VERBS_EMU_SYSFS", (dir + "/sys").c_str(), 1);
        if (!topo.empty()) setenv("NCCL_TOPO_FILE", topo.c_str(), 1);
      });
  EXPECT_EQ(failures(results), "");
  return devicesUsed(dir);
}

// An XDR port: the 8-bit speed code reads 0 where rdma-core predates active_speed_ex,
// and the rate comes from sysfs (800 Gbit/s), which the tuner then uses.
TEST(IbRate, XdrFromSysfsWhereTheSpeedCodeCannotSayIt) {
  std::string dir = scratchDir();
  fakeSysfs(dir + "/sys", 0, 0);
  std::filesystem::create_directories(dir + "/sys/class/infiniband/semu0/ports/1");
  std::ofstream(dir + "/sys/class/infiniband/semu0/ports/1/rate") << "800 Gb/sec (4X XDR)\n";
  // One all-reduce at that rate: the tuner picks the leaders' one-shot, whose links
  // come up inside the operation, so a rank's last receives are posted while its
  // peer finishes and leaves (this once lost a message that had landed, 1 run in 40).
  auto results = onFakeNodes(2, dir, allReduceOnce, [dir](int) {
    setenv("STRATA_VERBS_EMU_SPEED", "0", 1);
    setenv("STRATA_VERBS_EMU_SYSFS", (dir + "/sys").c_str(), 1);
  });
  ASSERT_EQ(failures(results), "");
  auto logs = rankLogs(dir);
  ASSERT_EQ(logs.size(), 2u);
  for (const auto& lines : logs) {
    std::string all;
    for (const std::string& l : lines) all += l + "\n";
    EXPECT_NE(all.find("semu0:1 has speed code 0, width code 2: 800000 Mbit/s from sysfs"), std::string::npos) << all;
    EXPECT_NE(all.find("using semu0:1 (RoCE, 800000 Mbit/s"), std::string::npos) << all;
  }
  std::filesystem::remove_all(dir);
}

// Without a NIC in the topology, a rank uses a device on its own NUMA node (this
// machine's ranks run on node 0): semu1 when it is there, semu0 when that one is.
TEST(IbRails, TheDeviceOnTheRanksNumaNode) {
  for (int local : {0, 1}) {
    std::string dir = scratchDir();
    auto used = railsOfARun(dir, local == 0 ? 0 : 1, local == 1 ? 0 : 1, "");
    std::string want = "semu" + std::to_string(local);
    EXPECT_EQ(used, std::vector<std::string>(2, want));
    std::filesystem::remove_all(dir);
  }
}

// The NIC the topology puts nearest the rank wins over NUMA, matched by its name,
// or by its PCI bus id where the name is not the network's.
TEST(IbRails, TheTopologysNearestNicByNameOrPciBusId) {
  std::string dir = scratchDir();
  auto used = railsOfARun(dir, 1, 0, topologyWithNic(dir, "semu0", "0000:11:00.0"));
  EXPECT_EQ(used, std::vector<std::string>(2, "semu0"));  // by name (NUMA alone would pick semu1)
  std::filesystem::remove_all(dir);
  dir = scratchDir();
  used = railsOfARun(dir, 0, 1, topologyWithNic(dir, "mlx5_7", "0000:5e:00.0"));
  EXPECT_EQ(used, std::vector<std::string>(2, "semu1"));  // by PCI bus id (NUMA alone would pick semu0)
  std::filesystem::remove_all(dir);
}

// The tuner's choices ("TUNING" lines: collective, size, algorithm, protocol, the
// estimate) each rank logged, in order.
std::vector<std::string> choicesOf(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& lines : rankLogs(dir))
    for (const std::string& line : lines) {
      size_t at = line.find("NCCL INFO ");
      std::smatch m;
      std::string tail = at == std::string::npos ? "" : line.substr(at + 10);
      if (std::regex_search(tail, m, std::regex("^(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce) .*")))
        out.push_back(line.substr(line.find('['), 5) + tail);  // "[r] " and the line
    }
  std::sort(out.begin(), out.end());
  return out;
}

// Every collective at sizes from 8 B to 512 KiB (x16) on `nodes` x `perNode` ranks over
// `net` (NCCL_NET), the network's rate pinned; returns the choices logged.
std::vector<std::string> choicesOver(const char* net, int nodes, int perNode) {
  std::string dir = scratchDir();
  auto results = onFakeNodes(
      nodes * perNode, dir,
      [](int rank, int n, const ncclUniqueId& id) -> std::string {
        ncclComm_t comm;
        RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
        std::vector<float> in((4u << 20) / 4 * n, 1.0f), out(in.size());
        for (size_t bytes = 8; bytes <= (4u << 20); bytes *= 16) {
          size_t count = bytes / 4;
          RANK_NCCL(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr));
          if (out[0] != static_cast<float>(n)) return "wrong all-reduce";
          RANK_NCCL(ncclAllGather(in.data(), out.data(), count, ncclFloat, comm, nullptr));
          RANK_NCCL(ncclReduceScatter(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr));
          if (out[0] != static_cast<float>(n)) return "wrong reduce-scatter";
          RANK_NCCL(ncclBroadcast(in.data(), out.data(), count, ncclFloat, 0, comm, nullptr));
          RANK_NCCL(ncclReduce(in.data(), out.data(), count, ncclFloat, ncclSum, 0, comm, nullptr));
        }
        ncclCommDestroy(comm);
        return "";
      },
      [net](int) {
        setenv("NCCL_NET", net, 1);
        setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
        setenv("STRATA_NET_GBPS", "12.5", 1);
      },
      nodes);
  EXPECT_EQ(failures(results), "") << net;
  auto choices = choicesOf(dir);
  std::filesystem::remove_all(dir);
  return choices;
}

// For the same link rate, the tuner makes the same choices over IB as over TCP
// (2 nodes x 2 ranks and 4 x 2): what it knows of a network is its rate.
TEST(IbChoices, TheSameAsOverTcpForTheSameLinkRate) {
  for (auto [nodes, perNode] : {std::pair{2, 2}, {4, 2}}) {
    SCOPED_TRACE(std::to_string(nodes) + "x" + std::to_string(perNode));
    auto ib = choicesOver("IB", nodes, perNode), tcp = choicesOver("Socket", nodes, perNode);
    EXPECT_EQ(ib.size(), static_cast<size_t>(nodes * perNode * 5 * 5));  // every rank, collective and size (8 B..512 KiB)
    EXPECT_EQ(ib, tcp);
  }
}

}  // namespace
}  // namespace strata::test
