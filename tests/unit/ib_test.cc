// The IB network's parts: NCCL_IB_HCA, port rates, the registration cache, and the
// network itself over the user-space verbs device (tests/verbs_emu), in one process:
// data lands in the receiver's own buffer, a steady loop registers nothing, sizes
// and a peer that goes away fail with named errors.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "transports/ib/hca_filter.h"
#include "transports/ib/ib_conns.h"
#include "transports/ib/ib_devices.h"
#include "transports/ib/ib_network.h"
#include "transports/ib/mr_cache.h"
#include "transports/net/nccl_net.h"
#include "transports/net/net_transport.h"
#include "ib_emu.h"
#include "network_link.h"

namespace strata::transport::ib {
namespace {

// Before anything reads the configuration: the emulator is the verbs library.
const int kEnv = [] {
  setenv("STRATA_IBVERBS_LIB", STRATA_VERBS_EMU_PATH, 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  return 0;
}();

TEST(HcaFilter, PrefixExactExcludeAndPorts) {
  EXPECT_TRUE(HcaFilter("").selects("mlx5_3", 1));
  HcaFilter prefix("mlx5_1");
  EXPECT_TRUE(prefix.selects("mlx5_1", 1));
  EXPECT_TRUE(prefix.selects("mlx5_10", 2));
  EXPECT_FALSE(prefix.selects("mlx5_0", 1));
  HcaFilter exact("=mlx5_1");
  EXPECT_TRUE(exact.selects("mlx5_1", 1));
  EXPECT_FALSE(exact.selects("mlx5_10", 1));
  HcaFilter ports("mlx5_0:1,mlx5_1:2");
  EXPECT_TRUE(ports.selects("mlx5_0", 1));
  EXPECT_FALSE(ports.selects("mlx5_0", 2));
  EXPECT_TRUE(ports.selects("mlx5_1", 2));
  EXPECT_FALSE(ports.selects("mlx5_1", 1));
  HcaFilter exclude("^mlx5_0");
  EXPECT_FALSE(exclude.selects("mlx5_0", 1));
  EXPECT_FALSE(exclude.selects("mlx5_01", 1));
  EXPECT_TRUE(exclude.selects("mlx5_1", 1));
  HcaFilter excludeExactPort("^=mlx5_0:2");
  EXPECT_TRUE(excludeExactPort.selects("mlx5_0", 1));
  EXPECT_FALSE(excludeExactPort.selects("mlx5_0", 2));
  EXPECT_TRUE(excludeExactPort.selects("mlx5_01", 2));
}

TEST(PortRate, FromSpeedAndWidthCodes) {
  EXPECT_EQ(portRateMbps(32, 2), 100000);   // EDR 4x
  EXPECT_EQ(portRateMbps(64, 2), 200000);   // HDR 4x
  EXPECT_EQ(portRateMbps(128, 2), 400000);  // NDR 4x
  EXPECT_EQ(portRateMbps(64, 16), 100000);  // HDR 2x
  EXPECT_EQ(portRateMbps(16, 1), 14000);    // FDR 1x
  EXPECT_EQ(portRateMbps(256, 2), 800000);  // XDR 4x (active_speed_ex)
  EXPECT_EQ(portRateMbps(3, 2), 0);
  EXPECT_EQ(portRateMbps(32, 3), 0);
}

TEST(PortRate, FromSysfsWhereTheCodeCannotSayIt) {
  std::string dev = testing::TempDir() + "/strata-rate-" + std::to_string(getpid());
  std::filesystem::create_directories(dev + "/ports/1");
  std::filesystem::create_directories(dev + "/ports/2");
  std::ofstream(dev + "/ports/1/rate") << "800 Gb/sec (4X XDR)\n";
  std::ofstream(dev + "/ports/2/rate") << "2.5 Gb/sec (1X SDR)\n";
  EXPECT_EQ(sysfsRateMbps(dev, 1), 800000);
  EXPECT_EQ(sysfsRateMbps(dev, 2), 2500);
  EXPECT_EQ(sysfsRateMbps(dev, 3), 0);  // no such port
  EXPECT_EQ(sysfsRateMbps("", 1), 0);   // a device with no sysfs path
  std::ofstream(dev + "/ports/2/rate") << "fast\n";
  EXPECT_EQ(sysfsRateMbps(dev, 2), 0);
  std::filesystem::remove_all(dev);
}

struct FakeDevice {
  std::vector<std::pair<uintptr_t, size_t>> live;
  int registrations = 0, deregistrations = 0;
  bool refuse = false;
  MrCache cache{[this](void* b, size_t n) -> void* {
                  if (refuse) {
                    errno = ENOMEM;
                    return nullptr;
                  }
                  ++registrations;
                  live.emplace_back(reinterpret_cast<uintptr_t>(b), n);
                  return reinterpret_cast<void*>(static_cast<uintptr_t>(registrations));
                },
                [this](void*) { ++deregistrations; }, 1 << 20};
};

TEST(MrCache, WholePagesSharedAndReferenceCounted) {
  FakeDevice d;
  alignas(4096) static char buf[4 * 4096];
  void* a = d.cache.acquire(buf + 10, 100);
  ASSERT_EQ(d.live.size(), 1u);
  EXPECT_EQ(d.live[0].first, reinterpret_cast<uintptr_t>(buf));
  EXPECT_EQ(d.live[0].second, 4096u);
  void* b = d.cache.acquire(buf + 2000, 2096);  // inside the same page: the same registration
  EXPECT_EQ(a, b);
  EXPECT_EQ(d.registrations, 1);
  EXPECT_EQ(d.cache.counters().hits, 1u);
  void* c = d.cache.acquire(buf + 4000, 200);  // crosses into the next page: a new one
  EXPECT_NE(c, a);
  EXPECT_EQ(d.live.back().second, 8192u);
  d.cache.release(a);
  EXPECT_EQ(d.deregistrations, 0);  // b still holds it
  d.cache.release(b);
  EXPECT_EQ(d.deregistrations, 1);  // the last release ends it: nothing pins freed memory
  d.cache.release(c);
  EXPECT_EQ(d.deregistrations, 2);
  EXPECT_EQ(d.cache.counters().bytes, 0u);
  void* again = d.cache.acquire(buf, 4096);  // after release, a fresh registration
  EXPECT_EQ(d.registrations, 3);
  d.cache.release(again);
}

TEST(MrCache, LimitAndRefusalsAreNamedErrors) {
  FakeDevice d;
  static std::vector<char> big(3 << 20);
  try {
    d.cache.acquire(big.data(), 2 << 20);
    FAIL() << "over the limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("over the limit"), std::string::npos) << e.what();
  }
  d.refuse = true;
  try {
    d.cache.acquire(big.data(), 100);
    FAIL() << "refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclSystemError);
    EXPECT_NE(std::string(e.what()).find("ibv_reg_mr"), std::string::npos) << e.what();
  }
  EXPECT_THROW(d.cache.release(reinterpret_cast<void*>(99)), Error);
}

// NCCL_IB_PCI_RELAXED_ORDERING's default (2: where supported): the emulator exports
// ibv_reg_mr_iova2, so the device's registrations carry IBV_ACCESS_RELAXED_ORDERING.
TEST(IbDevices, RelaxedOrderingWhereTheLibraryOffersIt) {
  const std::vector<Port>& ps = ports();
  ASSERT_FALSE(ps.empty()) << "no IB port over " << config().ibverbsLib;
  EXPECT_TRUE(ps[0].relaxedOrdering);
  void* emu = dlopen(config().ibverbsLib.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(emu, nullptr);
  auto access = reinterpret_cast<int (*)(uint32_t)>(dlsym(emu, "strata_verbs_emu_mr_access"));
  ASSERT_NE(access, nullptr);
  std::vector<char> buf(8192);
  auto* mr = static_cast<ibv_mr*>(ps[0].mrs->acquire(buf.data(), buf.size()));
  ASSERT_NE(mr, nullptr);
  EXPECT_NE(access(mr->lkey) & IBV_ACCESS_RELAXED_ORDERING, 0);
  EXPECT_NE(access(mr->lkey) & IBV_ACCESS_REMOTE_WRITE, 0);
  ps[0].mrs->release(mr);
}

TEST(IbNetwork, OverTheEmulatorMessagesLandInTheReceiversBufferAndNothingRegistersInTheLoop) {
  Link l;
  ASSERT_NE(l.net, nullptr) << "no IB network over " << config().ibverbsLib;
  ASSERT_TRUE(l.send && l.recv);
  EXPECT_EQ(l.net->name(), "IB");
  EXPECT_EQ(l.net->properties(0).name, "semu0");
  EXPECT_EQ(l.net->properties(0).speedMbps, 100000);
  std::vector<uint32_t> src(1 << 18), dst(1 << 18);
  void* smh = l.net->regMr(l.send, src.data(), src.size() * 4, net::abi::kPtrHost);
  void* rmh = l.net->regMr(l.recv, dst.data(), dst.size() * 4, net::abi::kPtrHost);
  Counters before = counters();
  uint64_t writes = 0;
  for (int it = 0; it < 50; ++it) {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint32_t>(it * 1000003 + i);
    size_t bytes = (src.size() - static_cast<size_t>(it)) * 4;  // sizes differ, offsets stay
    writes += writesFor(bytes);
    void* r = nullptr;
    while (!(r = l.net->irecv(l.recv, dst.data(), dst.size() * 4, 0, rmh))) {
    }
    void* s = l.post(src.data(), bytes, 0, smh);
    ASSERT_NE(s, nullptr) << "the receive never reached the sender's FIFO";
    size_t got = 0, sent = 0;
    ASSERT_TRUE(l.wait(r, &got));
    ASSERT_TRUE(l.wait(s, &sent));
    ASSERT_EQ(got, bytes);
    ASSERT_EQ(sent, bytes);
    for (size_t i = 0; i < bytes / 4; ++i) ASSERT_EQ(dst[i], src[i]) << "iteration " << it << " word " << i;
  }
  Counters after = counters();
  EXPECT_EQ(after.registrations, before.registrations);  // registered once, before the loop
  EXPECT_EQ(after.messagesSent - before.messagesSent, 50u);
  EXPECT_EQ(after.dataWrites - before.dataWrites, writes);  // one RDMA write each (per max_msg_sz), into dst
  EXPECT_EQ(after.fifoWrites - before.fifoWrites, 50u);
  l.net->deregMr(l.send, smh);
  l.net->deregMr(l.recv, rmh);
}

// Adaptive routing (NCCL_IB_ADAPTIVE_ROUTING=1; unset, on InfiniBand only, and the
// emulated port is RoCE): a message above NCCL_IB_AR_THRESHOLD moves as plain RDMA
// writes and then a write of no bytes carrying the immediate, so one more data
// write; at or below it, and with it off, one write. Every message lands exact and
// its size arrives.
TEST(IbNetwork, AdaptiveRoutingSendsTheImmediateApartAboveTheThreshold) {
  for (const char* ar : {"1", "0", ""}) {
    SCOPED_TRACE(std::string("NCCL_IB_ADAPTIVE_ROUTING=") + ar);
    *ar ? setenv("NCCL_IB_ADAPTIVE_ROUTING", ar, 1) : unsetenv("NCCL_IB_ADAPTIVE_ROUTING");
    setenv("NCCL_IB_AR_THRESHOLD", "65536", 1);
    reloadConfig();
    {
      Link l;
      ASSERT_TRUE(l.send && l.recv);
      void* emu = dlopen(config().ibverbsLib.c_str(), RTLD_NOW | RTLD_NOLOAD);
      auto qpStats = emu ? reinterpret_cast<int (*)(uint32_t, uint64_t*, uint64_t*)>(
                               dlsym(emu, "strata_verbs_emu_qp_stats"))
                         : nullptr;
      ASSERT_NE(qpStats, nullptr);
      uint32_t qpn = static_cast<conn::SendComm*>(l.send)->q.qps[0]->qp_num;
      std::vector<uint32_t> src(1 << 18), dst((1 << 18) + 4);
      void* smh = l.net->regMr(l.send, src.data(), src.size() * 4, net::abi::kPtrHost);
      void* rmh = l.net->regMr(l.recv, dst.data(), dst.size() * 4, net::abi::kPtrHost);
      for (size_t bytes : {size_t(65536), size_t(65540), size_t(1) << 20, size_t(12)}) {
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint32_t>(bytes * 31 + i);
        std::fill(dst.begin(), dst.end(), 0);
        Counters before = counters();
        uint64_t posts0 = 0, done0 = 0, posts1 = 0, done1 = 0;
        ASSERT_EQ(qpStats(qpn, &posts0, &done0), 0);
        void* r = nullptr;
        while (!(r = l.net->irecv(l.recv, dst.data(), dst.size() * 4, 0, rmh))) {
        }
        void* s = l.post(src.data(), bytes, 0, smh);
        ASSERT_NE(s, nullptr);
        size_t got = 0, sent = 0;
        ASSERT_TRUE(l.wait(r, &got));
        ASSERT_TRUE(l.wait(s, &sent));
        ASSERT_EQ(got, bytes);
        for (size_t i = 0; i < bytes / 4; ++i) ASSERT_EQ(dst[i], src[i]) << bytes << " bytes, word " << i;
        EXPECT_EQ(dst[bytes / 4 + 1], 0u) << "nothing past the message";
        bool apart = std::string(ar) == "1" && bytes > 65536;
        EXPECT_EQ(counters().dataWrites - before.dataWrites, writesFor(bytes) + (apart ? 1 : 0)) << bytes << " bytes";
        // Whatever the writes, one chain posted in one call with one completion (selective signalling).
        ASSERT_EQ(qpStats(qpn, &posts1, &done1), 0);
        EXPECT_EQ(posts1 - posts0, 1u) << bytes << " bytes";
        EXPECT_EQ(done1 - done0, 1u) << bytes << " bytes";
      }
      l.net->deregMr(l.send, smh);
      l.net->deregMr(l.recv, rmh);
    }
  }
  unsetenv("NCCL_IB_ADAPTIVE_ROUTING");
  unsetenv("NCCL_IB_AR_THRESHOLD");
  reloadConfig();
}

// A dma-buf as a GPU driver exports device memory: a memfd whose pages this test
// maps only to check them (the GPU's view); the network is handed the buffer's
// address, an iova this process never maps, and the fd at an offset.
struct DmaBuf {
  static constexpr uint64_t kOffset = 8192;
  int fd = -1;
  size_t bytes;
  char* view = nullptr;  // the pages at kOffset, for the test's own checks
  void* iova;
  DmaBuf(size_t n, uint64_t at) : bytes(n), iova(reinterpret_cast<void*>(at)) {
    fd = memfd_create("strata-test-dmabuf", 0);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(kOffset + n)) != 0) return;
    void* m = mmap(nullptr, kOffset + n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) view = static_cast<char*>(m) + kOffset;
  }
  ~DmaBuf() {
    if (view) munmap(view - kOffset, kOffset + bytes);
    if (fd >= 0) close(fd);
  }
};

// GPUDirect RDMA's path through the network: a receive into a dma-buf registration
// lands in its pages (written by the emulated NIC through its own mapping of the
// fd), a flush reads back through a loopback queue pair, a send from one reads
// them; host registrations need no flush. Device memory itself is simulated by a
// memfd: no GPU here.
TEST(IbNetwork, DmaBufRegistrationsReceiveSendAndFlush) {
  Link l;
  ASSERT_NE(l.net, nullptr) << "no IB network over " << config().ibverbsLib;
  int ptr = l.net->properties(0).ptrSupport;
  EXPECT_EQ(ptr & (net::abi::kPtrCuda | net::abi::kPtrDmabuf), net::abi::kPtrCuda | net::abi::kPtrDmabuf);
  constexpr size_t kBytes = (1 << 20) + 12;
  DmaBuf in(kBytes, 0x7e1000000000), out(kBytes, 0x7e2000000000);
  ASSERT_TRUE(in.view && out.view);
  std::vector<char> src(kBytes), dst(kBytes);
  for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<char>(byteOf(1, i));
  for (size_t i = 0; i < kBytes; ++i) out.view[i] = static_cast<char>(byteOf(2, i));
  Counters before = counters();
  void* rmh = l.net->regMrDmaBuf(l.recv, in.iova, kBytes, net::abi::kPtrCuda, DmaBuf::kOffset, in.fd);
  void* smh = l.net->regMr(l.send, src.data(), kBytes, net::abi::kPtrHost);
  void* r = l.net->irecv(l.recv, in.iova, kBytes, 0, rmh);
  ASSERT_NE(r, nullptr);
  void* s = l.post(src.data(), kBytes, 0, smh);
  ASSERT_NE(s, nullptr);
  size_t got = 0;
  ASSERT_TRUE(l.wait(r, &got));
  ASSERT_TRUE(l.wait(s, nullptr));
  EXPECT_EQ(got, kBytes);
  // Completed, but the device does not see it yet (the emulator holds the NIC's writes
  // into device memory until a read through the NIC, as PCIe orders nothing between
  // them and the completion): a consumer that skipped the flush would read this.
  EXPECT_FALSE(std::equal(src.begin(), src.end(), in.view)) << "device memory showed a receive before its flush";
  void* flush = nullptr;
  ASSERT_TRUE(l.net->iflush(l.recv, in.iova, kBytes, rmh, &flush));
  ASSERT_NE(flush, nullptr) << "a receive into device memory needs a flush";
  ASSERT_TRUE(l.wait(flush, nullptr));
  EXPECT_TRUE(std::equal(src.begin(), src.end(), in.view));
  // The other way: a send straight from device memory into a host buffer.
  void* omh = l.net->regMrDmaBuf(l.send, out.iova, kBytes, net::abi::kPtrCuda, DmaBuf::kOffset, out.fd);
  void* hmh = l.net->regMr(l.recv, dst.data(), kBytes, net::abi::kPtrHost);
  r = l.net->irecv(l.recv, dst.data(), kBytes, 0, hmh);
  s = l.post(out.iova, kBytes, 0, omh);
  ASSERT_TRUE(r && s);
  ASSERT_TRUE(l.wait(r, &got));
  ASSERT_TRUE(l.wait(s, nullptr));
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), out.view));
  ASSERT_TRUE(l.net->iflush(l.recv, dst.data(), kBytes, hmh, &flush));
  EXPECT_EQ(flush, nullptr) << "host memory needs no flush";
  // Relaxed ordering on the device registrations, as NCCL asks for them (the flush
  // makes it safe), where the port offers it.
  void* emu = dlopen(config().ibverbsLib.c_str(), RTLD_NOW | RTLD_NOLOAD);
  auto access = emu ? reinterpret_cast<int (*)(uint32_t)>(dlsym(emu, "strata_verbs_emu_mr_access")) : nullptr;
  ASSERT_NE(access, nullptr);
  for (void* mh : {rmh, omh}) EXPECT_NE(access(static_cast<ibv_mr*>(mh)->lkey) & IBV_ACCESS_RELAXED_ORDERING, 0);
  Counters after = counters();
  EXPECT_EQ(after.dmabufRegistrations - before.dmabufRegistrations, 2u);
  EXPECT_EQ(after.flushes - before.flushes, 1u);
  for (auto [comm, mh] : {std::pair{l.recv, rmh}, {l.send, smh}, {l.send, omh}, {l.recv, hmh}}) l.net->deregMr(comm, mh);
}

// A dma-buf the kernel cannot map (not a buffer's fd) is a named error, not a crash.
TEST(IbNetwork, ADmaBufThatCannotBeMappedIsANamedError) {
  Link l;
  ASSERT_NE(l.net, nullptr);
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  try {
    l.net->regMrDmaBuf(l.recv, reinterpret_cast<void*>(0x7e3000000000), 4096, net::abi::kPtrCuda, 0, pipeFds[0]);
    ADD_FAILURE() << "a pipe registered as a dma-buf";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclSystemError);
    EXPECT_NE(std::string(e.what()).find("ibv_reg_dmabuf_mr"), std::string::npos) << e.what();
  }
  close(pipeFds[0]);
  close(pipeFds[1]);
}

TEST(IbNetwork, SplitOverQueuePairsReassemblesOddSizes) {
  SplitLink l(4);
  ASSERT_TRUE(l.send && l.recv);
  std::vector<char> src(1000003), dst(1000003, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 31 + 7);
  void* smh = l.net->regMr(l.send, src.data(), src.size(), net::abi::kPtrHost);
  void* rmh = l.net->regMr(l.recv, dst.data(), dst.size(), net::abi::kPtrHost);
  Counters before = counters();
  uint64_t writes = 0;
  for (size_t bytes : {size_t(1000003), size_t(1), size_t(0), size_t(513)}) {
    size_t chunk = ((bytes + 3) / 4 + 127) & ~size_t(127);  // four parts of whole 128-byte units
    for (size_t p = 0; p < 4; ++p) writes += writesFor(std::min(chunk, bytes - std::min(bytes, p * chunk)));
    void* r = l.net->irecv(l.recv, dst.data(), dst.size(), 3, rmh);
    ASSERT_NE(r, nullptr);
    void* s = l.post(src.data(), bytes, 3, smh);
    ASSERT_NE(s, nullptr);
    size_t got = 99;
    ASSERT_TRUE(l.wait(r, &got));
    ASSERT_TRUE(l.wait(s, nullptr));
    EXPECT_EQ(got, bytes);
    EXPECT_EQ(memcmp(dst.data(), src.data(), bytes), 0);
  }
  EXPECT_EQ(counters().dataWrites - before.dataWrites, writes);  // a write per part (per max_msg_sz) on each of 4
  l.net->deregMr(l.send, smh);
  l.net->deregMr(l.recv, rmh);
}

// NCCL_IB_TC and NCCL_IB_SL set every queue pair's class; NCCL_IB_FIFO_TC (RoCE, as
// the emulated port is) the receiver's, whose writes are the FIFO's control messages.
// Unset, the receiver's take NCCL_IB_TC too. A message crosses either way.
TEST(IbNetwork, TrafficClassesAsNcclSetsThem) {
  setenv("NCCL_IB_TC", "104", 1);
  setenv("NCCL_IB_SL", "3", 1);
  for (const char* fifo : {"96", ""}) {
    SCOPED_TRACE(std::string("NCCL_IB_FIFO_TC=") + fifo);
    *fifo ? setenv("NCCL_IB_FIFO_TC", fifo, 1) : unsetenv("NCCL_IB_FIFO_TC");
    reloadConfig();
    Link l;
    ASSERT_TRUE(l.send && l.recv);
    void* emu = dlopen(config().ibverbsLib.c_str(), RTLD_NOW | RTLD_NOLOAD);
    auto qpClass = emu ? reinterpret_cast<int (*)(uint32_t, int*, int*)>(dlsym(emu, "strata_verbs_emu_qp_class"))
                       : nullptr;
    ASSERT_NE(qpClass, nullptr);
    int tc = -1, sl = -1;
    ASSERT_EQ(qpClass(static_cast<conn::SendComm*>(l.send)->q.qps[0]->qp_num, &tc, &sl), 0);
    EXPECT_EQ(tc, 104);
    EXPECT_EQ(sl, 3);
    ASSERT_EQ(qpClass(static_cast<conn::RecvComm*>(l.recv)->q.qps[0]->qp_num, &tc, &sl), 0);
    EXPECT_EQ(tc, *fifo ? 96 : 104);
    EXPECT_EQ(sl, 3);
    std::vector<char> src(4099), dst(4099, 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(byteOf(11, i));
    void* smh = l.net->regMr(l.send, src.data(), src.size(), net::abi::kPtrHost);
    void* rmh = l.net->regMr(l.recv, dst.data(), dst.size(), net::abi::kPtrHost);
    void* r = l.net->irecv(l.recv, dst.data(), dst.size(), 2, rmh);
    ASSERT_NE(r, nullptr);
    void* s = l.post(src.data(), src.size(), 2, smh);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(l.wait(r, nullptr));
    ASSERT_TRUE(l.wait(s, nullptr));
    EXPECT_EQ(dst, src);
    l.net->deregMr(l.send, smh);
    l.net->deregMr(l.recv, rmh);
  }
  unsetenv("NCCL_IB_TC");
  unsetenv("NCCL_IB_SL");
  unsetenv("NCCL_IB_FIFO_TC");
  reloadConfig();
}

// Receives answered back to back with messages of many writes each: in the
// .small_max_msg variant (64 KiB writes) 8 messages of 32 MiB take 4096 writes, more
// than a queue pair's send queue holds, so sends wait for room (before, the device
// refused the post and the connection failed). Each lands exact, from its
// own offset of the source.
TEST(IbNetwork, MessagesOfManyWritesWaitForSendQueueRoom) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  constexpr int kMsgs = 8;
  constexpr size_t kBytes = size_t(32) << 20, kShift = 64;
  std::vector<char> src(kBytes + kMsgs * kShift);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(byteOf(7, i));
  std::vector<std::vector<char>> dst(kMsgs, std::vector<char>(kBytes, 0));
  void* smh = l.net->regMr(l.send, src.data(), src.size(), net::abi::kPtrHost);
  std::vector<void*> rmh(kMsgs), recvs(kMsgs), sends(kMsgs);
  for (int m = 0; m < kMsgs; ++m) {
    rmh[m] = l.net->regMr(l.recv, dst[m].data(), kBytes, net::abi::kPtrHost);
    recvs[m] = l.net->irecv(l.recv, dst[m].data(), kBytes, 5, rmh[m]);
    ASSERT_NE(recvs[m], nullptr) << "receive " << m;
  }
  Counters before = counters();
  for (int m = 0; m < kMsgs; ++m) {
    sends[m] = l.post(src.data() + m * kShift, kBytes, 5, smh, 20);
    ASSERT_NE(sends[m], nullptr) << "send " << m << " never found room";
  }
  for (int m = 0; m < kMsgs; ++m) {
    size_t got = 0;
    ASSERT_TRUE(l.wait(recvs[m], &got, 20)) << "receive " << m;
    ASSERT_TRUE(l.wait(sends[m], nullptr, 20)) << "send " << m;
    ASSERT_EQ(got, kBytes);
    ASSERT_EQ(memcmp(dst[m].data(), src.data() + m * kShift, kBytes), 0) << "message " << m;
  }
  EXPECT_EQ(counters().dataWrites - before.dataWrites, kMsgs * writesFor(kBytes));
  l.net->deregMr(l.send, smh);
  for (void* mh : rmh) l.net->deregMr(l.recv, mh);
}

TEST(IbNetwork, AMessageLargerThanTheReceiveIsRefusedWithBothSizes) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  std::vector<char> src(4096), dst(100);
  void* smh = l.net->regMr(l.send, src.data(), src.size(), net::abi::kPtrHost);
  void* rmh = l.net->regMr(l.recv, dst.data(), dst.size(), net::abi::kPtrHost);
  ASSERT_NE(l.net->irecv(l.recv, dst.data(), dst.size(), 0, rmh), nullptr);
  try {
    l.post(src.data(), 1000, 0, smh);
    FAIL() << "sent 1000 bytes into a receive of 100";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("1000 bytes to a receive of 100"), std::string::npos) << e.what();
  }
  l.net->deregMr(l.send, smh);
  l.net->deregMr(l.recv, rmh);
}

TEST(IbNetwork, APeerThatClosesIsARemoteErrorWithinASecond) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  std::vector<char> dst(4096);
  void* rmh = l.net->regMr(l.recv, dst.data(), dst.size(), net::abi::kPtrHost);
  void* r = l.net->irecv(l.recv, dst.data(), dst.size(), 0, rmh);
  ASSERT_NE(r, nullptr);
  l.net->closeSend(l.send);  // as a process that exits does
  l.send = nullptr;
  auto start = std::chrono::steady_clock::now();
  try {
    l.wait(r, nullptr, 3);
    FAIL() << "the receive outlived its sender";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclRemoteError);
    std::string what = e.what();  // the closed stream, or the FIFO write that found the sender's QP gone
    EXPECT_TRUE(what.find("closed the connection") != std::string::npos ||
                what.find("retry counter exceeded") != std::string::npos)
        << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  l.net->deregMr(l.recv, rmh);
}

TEST(IbNetwork, AQueuePairForcedIntoErrorFailsItsRequestsNamed) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  void* emu = dlopen(config().ibverbsLib.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(emu, nullptr);
  auto failAll = reinterpret_cast<int (*)()>(dlsym(emu, "strata_verbs_emu_fail_all_qps"));
  ASSERT_NE(failAll, nullptr);
  std::vector<char> dst(4096);
  void* rmh = l.net->regMr(l.recv, dst.data(), dst.size(), net::abi::kPtrHost);
  void* r = l.net->irecv(l.recv, dst.data(), dst.size(), 0, rmh);
  ASSERT_NE(r, nullptr);
  EXPECT_GT(failAll(), 0);
  auto start = std::chrono::steady_clock::now();
  try {
    l.wait(r, nullptr, 3);
    FAIL() << "a receive on a queue pair in error completed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("QP 0x"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Flushed"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  l.net->deregMr(l.recv, rmh);
}

}  // namespace
}  // namespace strata::transport::ib
