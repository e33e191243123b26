// The transport conformance suite: every registered transport, through the
// Transport interface only, with exact data. A connection's two ends run as
// threads (transports that link ranks of one process) or as forked processes
// (the others); every case a transport's capabilities do not offer is skipped
// with the reason. A new transport joins by being in the registry.
#include <algorithm>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/peer_info.h"
#include "base/shared_buffers.h"
#include "base/socket.h"
#include "device/gpu.h"
#include "transports/transport.h"

namespace strata::transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kSlotBytes = 64 << 10;
constexpr int kSlotCount = 4;

// One end of a connection: who it is and the doorbell peers ring.
struct End {
  PeerInfo info;
  std::shared_ptr<Doorbell> bell;
};

// Rank 1's host: this one, or (STRATA_CONFORMANCE_TWO_HOSTS=1, for transports that
// link only ranks on different hosts, such as the net transport) another.
uint64_t hostOf(int rank) {
  uint64_t h = hostIdentity(nullptr);
  const char* two = getenv("STRATA_CONFORMANCE_TWO_HOSTS");
  return rank == 1 && two && *two == '1' ? h ^ 0x9e3779b97f4a7c15ull : h;
}

End makeEnd(int rank) {
  End e;
  e.info.rank = rank;
  e.info.pid = getpid();
  e.info.hostHash = hostOf(rank);
  e.info.processHash = processIdentity();
  e.info.machineHash = machineIdentity();
  std::string ifname;
  e.info.listenAddr = chooseInterfaceAddress("=lo", &ifname);
  snprintf(e.info.hostname, sizeof e.info.hostname, "conformance");
  e.bell = Doorbell::create();
  snprintf(e.info.bellName, sizeof e.info.bellName, "%s", e.bell->name().c_str());
  return e;
}

// Both ends in one process when the transport links threads; else a child process.
bool threaded(const Transport& t) {
  End a = makeEnd(0), b = makeEnd(1);
  return t.canConnect(a.info, b.info) && std::string(t.name()) == "loopback";
}

// Waits (polling, as the executor does) until `ready` holds; fails after 30 s.
template <typename F>
bool within(F ready, double seconds = 30) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (!ready()) {
    if (Clock::now() > deadline) return false;
    progressBackground();
    std::this_thread::yield();
  }
  return true;
}

unsigned char pattern(size_t message, size_t i) { return static_cast<unsigned char>(message * 131 + i * 7 + 1); }

// Runs the receiver here and the sender on a thread or in a child; returns the
// sender's failure text ("" on success).
using SenderFn = std::function<std::string(Transport&, SendConnection&)>;
using ReceiverFn = std::function<void(Transport&, RecvConnection&, pid_t peer)>;

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  Transport& transport() { return *findTransport(GetParam()); }

  void run(const SenderFn& sender, const ReceiverFn& receiver, int connections = 1) {
    Transport& t = transport();
    if (!t.has(kSlots)) GTEST_SKIP() << t.name() << " has no two-sided slots";
    if (threaded(t)) return runThreads(t, sender, receiver, connections);
    // A transport that cannot link the two ends would wait for a connection that never comes.
    End a = makeEnd(0), b = makeEnd(1);
    b.info.processHash ^= 1;  // the sender runs in a child process
    if (!t.canConnect(a.info, b.info))
      GTEST_SKIP() << t.name() << " cannot link two processes"
                   << (a.info.sameHost(b.info) ? " of one host (STRATA_CONFORMANCE_TWO_HOSTS=1 makes them two)" : "");
    runProcesses(t, sender, receiver, connections);
  }

 protected:
  bool senderDies_ = false;  // the case kills the sender on purpose

 private:
  void runThreads(Transport& t, const SenderFn& sender, const ReceiverFn& receiver, int connections) {
    End recvEnd = makeEnd(0), sendEnd = makeEnd(1);
    for (int c = 0; c < connections; ++c) {
      ConnectRequest rq{&recvEnd.info, &sendEnd.info, kSlotBytes, kSlotCount};
      std::string handle;
      auto in = t.listen(rq, &handle);
      ConnectRequest sq{&sendEnd.info, &recvEnd.info, kSlotBytes, kSlotCount};
      auto out = t.connect(sq, handle);
      std::string err;
      std::thread th([&] { err = sender(t, *out); });
      receiver(t, *in, getpid());
      th.join();
      EXPECT_EQ(err, "");
    }
  }

  void runProcesses(Transport& t, const SenderFn& sender, const ReceiverFn& receiver, int connections) {
    int toChild[2], fromChild[2];
    ASSERT_EQ(pipe(toChild), 0);
    ASSERT_EQ(pipe(fromChild), 0);
    End recvEnd = makeEnd(0);
    pid_t pid = fork();
    if (pid == 0) {  // the sender
      End sendEnd = makeEnd(1);
      std::string err;
      try {
        for (int c = 0; c < connections && err.empty(); ++c) {
          uint32_t n = 0;
          if (read(toChild[0], &n, sizeof n) != sizeof n) _exit(20);
          std::string handle(n, '\0');
          if (read(toChild[0], handle.data(), n) != static_cast<ssize_t>(n)) _exit(21);
          ConnectRequest sq{&sendEnd.info, &recvEnd.info, kSlotBytes, kSlotCount};
          auto out = t.connect(sq, handle);
          err = sender(t, *out);
          within([&] { return out->flushed(); }, 30);
        }
      } catch (const std::exception& e) {
        err = e.what();
      }
      uint32_t n = static_cast<uint32_t>(err.size());
      if (write(fromChild[1], &n, sizeof n) != sizeof n || write(fromChild[1], err.data(), n) < 0) _exit(22);
      _exit(0);
    }
    close(toChild[0]);  // so that a child that dies ends the parent's read of its report
    close(fromChild[1]);
    End sendInfo = recvEnd;  // the child's identity as the receiver sees it
    sendInfo.info.rank = 1;
    sendInfo.info.pid = pid;
    sendInfo.info.processHash = recvEnd.info.processHash + 1;
    sendInfo.info.hostHash = hostOf(1);
    for (int c = 0; c < connections; ++c) {
      ConnectRequest rq{&recvEnd.info, &sendInfo.info, kSlotBytes, kSlotCount};
      std::string handle;
      auto in = t.listen(rq, &handle);
      uint32_t n = static_cast<uint32_t>(handle.size());
      ASSERT_EQ(write(toChild[1], &n, sizeof n), static_cast<ssize_t>(sizeof n));
      ASSERT_EQ(write(toChild[1], handle.data(), n), static_cast<ssize_t>(n));
      receiver(t, *in, pid);
    }
    uint32_t n = 0;
    std::string err = "the sender died";
    if (read(fromChild[0], &n, sizeof n) == sizeof n) {
      err.assign(n, '\0');
      if (n && read(fromChild[0], err.data(), n) != static_cast<ssize_t>(n)) err = "short report";
    }
    int status = 0;
    waitpid(pid, &status, 0);
    close(toChild[1]);
    close(fromChild[0]);
    EXPECT_EQ(err, senderDies_ ? "the sender died" : "");
  }
};

// The suites by capability: each is instantiated only over the transports that have
// it, so no case runs (and skips) on a transport it does not apply to.
class SlotConformance : public Conformance {};    // two-sided slots
class PutConformance : public Conformance {};     // one-sided writes
class GetConformance : public Conformance {};     // one-sided reads
class DeathConformance : public Conformance {};   // slots between processes: a peer can die
class RegionConformance : public Conformance {};  // host shared regions
class DeviceRegionConformance : public Conformance {};

// Messages arrive whole, in order, for sizes from 0 to a full slot (odd ones too).
TEST_P(SlotConformance, MessagesArriveInOrder) {
  std::vector<size_t> sizes = {0, 1, 7, 4096, 4097, kSlotBytes - 1, kSlotBytes, 3, 0, 12345};
  run(
      [&](Transport&, SendConnection& out) -> std::string {
        for (size_t m = 0; m < sizes.size(); ++m) {
          void* slot = nullptr;
          if (!within([&] { return (slot = out.trySlot()) != nullptr; })) return "no slot";
          for (size_t i = 0; i < sizes[m]; ++i) static_cast<unsigned char*>(slot)[i] = pattern(m, i);
          out.post(sizes[m]);
        }
        return "";
      },
      [&](Transport&, RecvConnection& in, pid_t) {
        for (size_t m = 0; m < sizes.size(); ++m) {
          const void* data = nullptr;
          size_t got = 0;
          ASSERT_TRUE(within([&] { return (data = in.tryData(&got)) != nullptr; })) << "message " << m;
          ASSERT_EQ(got, sizes[m]) << "message " << m;
          for (size_t i = 0; i < got; ++i)
            ASSERT_EQ(static_cast<const unsigned char*>(data)[i], pattern(m, i)) << "message " << m << " byte " << i;
          in.release();
        }
      });
}

// 64 MiB through slots with a receiver that pauses: the sender waits, nothing is lost.
TEST_P(SlotConformance, SlowReceiverBackPressure) {
  constexpr size_t kTotal = 64 << 20;
  run(
      [&](Transport&, SendConnection& out) -> std::string {
        for (size_t off = 0, m = 0; off < kTotal; ++m) {
          void* slot = nullptr;
          if (!within([&] { return (slot = out.trySlot()) != nullptr; })) return "no slot at " + std::to_string(off);
          size_t n = std::min(out.slotBytes() - m % 3, kTotal - off);  // odd sizes too
          memset(slot, static_cast<int>(m & 0xff), n);
          out.post(n);
          off += n;
        }
        return "";
      },
      [&](Transport&, RecvConnection& in, pid_t) {
        size_t total = 0;
        for (size_t m = 0; total < kTotal; ++m) {
          if (m % 64 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          const void* data = nullptr;
          size_t got = 0;
          ASSERT_TRUE(within([&] { return (data = in.tryData(&got)) != nullptr; })) << "at " << total;
          auto* b = static_cast<const unsigned char*>(data);
          ASSERT_TRUE(got == 0 || (b[0] == (m & 0xff) && b[got - 1] == (m & 0xff))) << "message " << m;
          total += got;
          in.release();
        }
        EXPECT_EQ(total, kTotal);
      });
}

// Many connections between the same two ends, open at once, each its own stream.
TEST_P(SlotConformance, ManyConnectionsAtOnce) {
  run(
      [&](Transport&, SendConnection& out) -> std::string {
        void* slot = nullptr;
        if (!within([&] { return (slot = out.trySlot()) != nullptr; })) return "no slot";
        memset(slot, 0x5a, 100);
        out.post(100);
        return "";
      },
      [&](Transport&, RecvConnection& in, pid_t) {
        const void* data = nullptr;
        size_t got = 0;
        ASSERT_TRUE(within([&] { return (data = in.tryData(&got)) != nullptr; }));
        EXPECT_EQ(got, 100u);
        in.release();
      },
      32);
}

// One-sided writes: exact data at every size up to 64 MiB straight into the
// receiver's offered memory (a mapped shared buffer too), and the refusals.
TEST_P(PutConformance, OneSidedWritesIntoRegisteredMemory) {
  std::vector<size_t> sizes = {0, 1, 4095, 1 << 20, (64 << 20) - 3};
  run(
      [&](Transport&, SendConnection& out) -> std::string {
        std::vector<unsigned char> src((64 << 20) + 16);
        for (size_t m = 0; m < sizes.size() + 1; ++m) {
          size_t n = m < sizes.size() ? sizes[m] : 4096;
          // The source may change only once the puts before are complete (an RDMA write reads it late).
          if (!within([&] { return out.puts()->putsComplete(); })) return "puts never complete";
          for (size_t i = 0; i < n; ++i) src[i] = pattern(m, i);
          if (!within([&] { return out.puts()->tryPut(src.data(), n); })) return "no offer";
        }
        if (!within([&] { return out.puts()->putsComplete(); })) return "puts never complete";
        try {  // the last offer is 16 bytes: a larger write is refused
          within([&] { return out.puts()->tryPut(src.data(), 17); }, 5);
          return "a write larger than its offer was accepted";
        } catch (const Error&) {
        }
        return "";
      },
      [&](Transport& t, RecvConnection& in, pid_t) {
        std::vector<unsigned char> dst((64 << 20) + 16, 0);
        auto reg = t.registerMemory(dst.data(), dst.size());
        ASSERT_TRUE(reg);
        EXPECT_THROW(in.puts()->tryOffer(dst.data() + 16, dst.size(), *reg, Transfer::kChained), Error)
            << "outside the registration";
        for (size_t m = 0; m < sizes.size(); ++m) {
          ASSERT_TRUE(within([&] { return in.puts()->tryOffer(dst.data(), sizes[m], *reg, Transfer::kChained); }));
          size_t got = 0;
          ASSERT_TRUE(within([&] { return in.puts()->tryPutDone(&got); })) << "write " << m;
          ASSERT_EQ(got, sizes[m]);
          for (size_t i = 0; i < got; ++i) ASSERT_EQ(dst[i], pattern(m, i)) << "write " << m << " byte " << i;
        }
        void* shared = allocateShared(1 << 20);  // ncclMemAlloc's memory: a mapped copy, no system call
        ASSERT_TRUE(shared);
        auto sreg = t.registerMemory(shared, 1 << 20);
        ASSERT_TRUE(within([&] { return in.puts()->tryOffer(shared, 4096, *sreg, Transfer::kChained); }));
        size_t got = 0;
        ASSERT_TRUE(within([&] { return in.puts()->tryPutDone(&got); }));
        for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(static_cast<unsigned char*>(shared)[i], pattern(sizes.size(), i));
        freeShared(shared);
        ASSERT_TRUE(within([&] { return in.puts()->tryOffer(dst.data(), 16, *reg, Transfer::kChained); }));
        reg->deregister();
        EXPECT_THROW(in.puts()->tryOffer(dst.data(), 16, *reg, Transfer::kChained), Error) << "after deregistration";
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the refused write happen
      });
}

// Point-to-point writes (independent offers), several posted ahead and more than the
// offers' ring holds: a transport may carry some through its slots (shm: those under
// 128 KiB into memory the writer cannot map), others straight into place, one
// connection mixing both; every one lands exact, in order, its size reported.
TEST_P(PutConformance, IndependentWritesOfMixedSizesLandInOrder) {
  const std::vector<size_t> cycle = {0, 1, 4095, 64 << 10, (128 << 10) - 1, 128 << 10, 1 << 20, 3};
  const size_t total = cycle.size() * 5, ahead = 4;
  auto sizeOf = [&](size_t m) { return cycle[m % cycle.size()]; };
  run(
      [&](Transport&, SendConnection& out) -> std::string {
        std::vector<unsigned char> src(1 << 20);
        for (size_t m = 0; m < total; ++m) {
          if (!within([&] { return out.puts()->putsComplete(); })) return "puts never complete";
          for (size_t i = 0; i < sizeOf(m); ++i) src[i] = pattern(m, i);
          if (!within([&] { return out.puts()->tryPut(src.data(), sizeOf(m)); })) return "no offer " + std::to_string(m);
        }
        return within([&] { return out.puts()->putsComplete(); }) ? "" : "puts never complete";
      },
      [&](Transport& t, RecvConnection& in, pid_t) {
        std::vector<std::vector<unsigned char>> dst(ahead, std::vector<unsigned char>(1 << 20));
        std::vector<std::shared_ptr<Registration>> regs;
        for (auto& d : dst) regs.push_back(t.registerMemory(d.data(), d.size()));
        size_t offered = 0;
        for (size_t m = 0; m < total; ++m) {
          for (; offered < total && offered < m + ahead; ++offered)
            ASSERT_TRUE(within([&] {
              return in.puts()->tryOffer(dst[offered % ahead].data(), sizeOf(offered), *regs[offered % ahead],
                                         Transfer::kIndependent);
            })) << "offer " << offered;
          size_t got = 0;
          ASSERT_TRUE(within([&] { return in.puts()->tryPutDone(&got); })) << "write " << m;
          ASSERT_EQ(got, sizeOf(m)) << "write " << m;
          const std::vector<unsigned char>& d = dst[m % ahead];
          for (size_t i = 0; i < got; ++i) ASSERT_EQ(d[i], pattern(m, i)) << "write " << m << " byte " << i;
        }
      });
}

// One-sided reads: the receiver copies exact data out of the sender's exposed
// memory (a mapped shared buffer too); exposures need a live registration.
TEST_P(GetConformance, OneSidedReadsOfExposedMemory) {
  std::vector<size_t> sizes = {0, 1, 4095, 1 << 20, (64 << 20) - 3};
  run(
      [&](Transport& t, SendConnection& out) -> std::string {
        std::vector<unsigned char> src(64 << 20);
        auto reg = t.registerMemory(src.data(), src.size());
        try {
          out.gets()->tryExpose(src.data() + 1, src.size(), *reg, Transfer::kIndependent);
          return "an exposure outside its registration was accepted";
        } catch (const Error&) {
        }
        for (size_t m = 0; m < sizes.size(); ++m) {
          for (size_t i = 0; i < sizes[m]; ++i) src[i] = pattern(m, i);
          if (!within([&] { return out.gets()->tryExpose(src.data(), sizes[m], *reg, Transfer::kIndependent); }))
            return "no room";
          // Waiting, the sender copies chunks of a large read for the receiver (as an idle rank does).
          if (!within([&] { return out.gets()->tryGetDone() || (out.gets()->helpRead() && false); }))
            return "never read";
        }
        void* shared = allocateShared(1 << 20);
        auto sreg = t.registerMemory(shared, 1 << 20);
        for (size_t i = 0; i < 4096; ++i) static_cast<unsigned char*>(shared)[i] = pattern(9, i);
        if (!within([&] { return out.gets()->tryExpose(shared, 4096, *sreg, Transfer::kIndependent); }))
          return "no room";
        bool read = within([&] { return out.gets()->tryGetDone(); });
        freeShared(shared);
        reg->deregister();
        try {
          out.gets()->tryExpose(src.data(), 16, *reg, Transfer::kIndependent);
          return "an exposure after deregistration was accepted";
        } catch (const Error&) {
        }
        return read ? "" : "the mapped buffer was never read";
      },
      [&](Transport&, RecvConnection& in, pid_t) {
        std::vector<unsigned char> dst(64 << 20, 0);
        for (size_t m = 0; m < sizes.size(); ++m) {
          size_t got = 0;
          ASSERT_TRUE(within([&] { return in.gets()->tryGet(dst.data(), dst.size(), &got); })) << "read " << m;
          ASSERT_EQ(got, sizes[m]);
          for (size_t i = 0; i < got; ++i) ASSERT_EQ(dst[i], pattern(m, i)) << "read " << m << " byte " << i;
        }
        size_t got = 0;
        ASSERT_TRUE(within([&] { return in.gets()->tryGet(dst.data(), dst.size(), &got); }));
        ASSERT_EQ(got, 4096u);
        for (size_t i = 0; i < got; ++i) ASSERT_EQ(dst[i], pattern(9, i));
      });
}

// An abort at one end ends the other end's wait (a waiting end polls, then asks).
TEST_P(SlotConformance, AbortFromTheOtherEnd) {
  run(
      [&](Transport&, SendConnection& out) -> std::string {
        out.abort();
        return "";
      },
      [&](Transport&, RecvConnection& in, pid_t) {
        size_t got = 0;  // a waiting receiver polls for data, then asks whether its peer gave up
        ASSERT_TRUE(within([&] { return !in.tryData(&got) && in.peerAborted(); }, 5))
            << "the receiver never saw the abort";
      });
}

// A peer that dies is reported within a second: by the connection, or by the
// transport's liveness check where the connection cannot tell.
TEST_P(DeathConformance, PeerThatDies) {
  senderDies_ = true;
  run(
      [&](Transport&, SendConnection& out) -> std::string {
        void* slot = nullptr;
        if (!within([&] { return (slot = out.trySlot()) != nullptr; })) return "no slot";
        out.post(0);
        within([&] { return out.flushed(); });  // posted is not sent: an RDMA write may still be queued here
        kill(getpid(), SIGKILL);
        return "";
      },
      [&](Transport& t, RecvConnection& in, pid_t peer) {
        size_t got = 0;
        ASSERT_TRUE(within([&] { return in.tryData(&got) != nullptr; }));
        in.release();
        PeerInfo p;
        p.pid = peer;
        auto start = Clock::now();
        waitpid(peer, nullptr, 0);
        ASSERT_TRUE(within([&] { return (!in.tryData(&got) && in.peerAborted()) || !t.peerAlive(p); }, 5));
        EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
      });
}

// Shared regions: zero-filled memory both ends map.
TEST_P(RegionConformance, SharedRegionsAreMappedByBoth) {
  Transport& t = transport();
  End a = makeEnd(0), b = makeEnd(1);
  ASSERT_TRUE(t.canConnect(a.info, b.info)) << t.name() << " cannot link the two ends";
  ConnectRequest ra{&a.info, &b.info, 0, 0}, rb{&b.info, &a.info, 0, 0};
  std::string handle;
  SharedRegion mine = t.regions()->createRegion(ra, 1 << 16, &handle);
  SharedRegion theirs = t.regions()->attachRegion(rb, handle);
  ASSERT_GE(theirs.bytes, size_t{1} << 16);
  for (size_t i = 0; i < (1 << 16); ++i) ASSERT_EQ(static_cast<char*>(mine.data)[i], 0);
  memset(theirs.data, 0x3c, 1 << 16);
  EXPECT_EQ(static_cast<unsigned char*>(mine.data)[12345], 0x3c);
}

// Device regions (cuda_ipc): device memory both ends reach, on a real or simulated GPU.
TEST_P(DeviceRegionConformance, DeviceRegionsAreMappedByBoth) {
  Transport& t = transport();
  if (device::gpuCount() == 0) GTEST_SKIP() << "no GPU: " << device::gpuUnavailableReason();
  End a = makeEnd(0), b = makeEnd(1);
  a.info.device = b.info.device = 0;
  ASSERT_TRUE(t.canConnect(a.info, b.info));
  ConnectRequest ra{&a.info, &b.info, 0, 0}, rb{&b.info, &a.info, 0, 0};
  std::string handle;
  SharedRegion mine = t.regions()->createRegion(ra, 1 << 16, &handle);
  SharedRegion theirs = t.regions()->attachRegion(rb, handle);
  ASSERT_TRUE(device::isDevicePointer(theirs.data));
  std::vector<unsigned char> in(1 << 16), out(1 << 16, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(3, i);
  device::copySync(theirs.data, in.data(), in.size());
  device::copySync(out.data(), mine.data, out.size());
  EXPECT_EQ(in, out);
}

std::vector<std::string> registered() {
  std::vector<std::string> names;
  for (Transport* t : transports()) names.push_back(t->name());
  return names;
}

// The registered transports `keep` says yes to.
std::vector<std::string> registered(const std::function<bool(Transport&)>& keep) {
  std::vector<std::string> names;
  for (Transport* t : transports())
    if (keep(*t)) names.push_back(t->name());
  return names;
}

auto byName = [](const auto& info) { return info.param; };
INSTANTIATE_TEST_SUITE_P(Registered, SlotConformance, ::testing::ValuesIn(registered([](Transport& t) { return t.has(kSlots); })), byName);
INSTANTIATE_TEST_SUITE_P(Registered, PutConformance, ::testing::ValuesIn(registered([](Transport& t) { return t.has(kPut); })), byName);
INSTANTIATE_TEST_SUITE_P(Registered, GetConformance, ::testing::ValuesIn(registered([](Transport& t) { return t.has(kGet); })), byName);
INSTANTIATE_TEST_SUITE_P(Registered, DeathConformance,
                         ::testing::ValuesIn(registered([](Transport& t) { return t.has(kSlots) && !threaded(t); })), byName);
// Host shared regions where the two ends of a test can be linked (shm needs processes).
INSTANTIATE_TEST_SUITE_P(Registered, RegionConformance, ::testing::ValuesIn(registered([](Transport& t) {
                           End a = makeEnd(0), b = makeEnd(1);
                           return t.has(kSharedRegions) && !t.has(kDeviceMemory) && t.canConnect(a.info, b.info);
                         })), byName);
INSTANTIATE_TEST_SUITE_P(Registered, DeviceRegionConformance,
                         ::testing::ValuesIn(registered([](Transport& t) { return t.has(kDeviceMemory); })), byName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Conformance);

// Two processes of one host over the network transport (a net plugin loaded, the
// ends not claiming two hosts): the transport refuses to link them at once, where it
// used to accept and wait for a connection that never came. Run by the variant that
// loads a plugin; the plain run has no network transport to ask.
TEST(ConformanceSetup, TheNetworkRefusesTwoProcessesOfOneHost) {
  Transport* net = findTransport("net");
  if (!net) GTEST_SKIP() << "no network transport registered (the variant sets NCCL_NET_PLUGIN)";
  End a = makeEnd(0), b = makeEnd(1);
  b.info.processHash ^= 1;
  ASSERT_TRUE(a.info.sameHost(b.info));
  auto start = Clock::now();
  EXPECT_FALSE(net->canConnect(a.info, b.info));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
}

// A variant that runs the suite on one transport names it (STRATA_CONFORMANCE_EXPECT),
// so that a transport missing from the registry fails instead of running nothing.
TEST(ConformanceSetup, ExpectedTransportIsRegistered) {
  const char* want = getenv("STRATA_CONFORMANCE_EXPECT");
  if (!want) GTEST_SKIP() << "no STRATA_CONFORMANCE_EXPECT";
  std::vector<std::string> names = registered();
  EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want << " is not registered";
}

}  // namespace
}  // namespace strata::transport
