// The device-driven point-to-point protocol (device/kernel_p2p.h) over the host
// primitives (device/sim_prims.h), with no GPU at all: ranks are threads, regions plain
// memory. (The collective kernel's protocol: pipe_protocol_test.cc.)
// Under weak memory a block's stores into peers' regions wait for a system fence;
// the protocol is exact there, and the same protocol without its fence is not.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"
#include "device/sim_prims.h"
#include "verify/reference.h"

namespace strata::test {
namespace {

using device::KernelP2p;

// The primitives with the fence before each flag left out, as a protocol that
// forgot it would run: ordering only, nothing held is published.
class NoFence : public device::sim::HostPrims {
 public:
  using HostPrims::HostPrims;
  void fenceSystem() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
};

// Point-to-point (kernel_p2p.h): every rank sends four messages to the next rank and
// receives four from the previous one, in one kernel per rank, every block on a
// thread of its own (as the simulator runs it: a GPU runs all blocks at once). The
// sizes cross chunks and outgrow the slots, so senders wait for receivers; the short
// ones (3 and 65 bytes) leave some blocks of a lane without a part, so the blocks'
// chunk counts differ, and cover a chunk that is not a multiple of 64 bytes. With
// `mixed`, rank r runs (r + op) % 4 + 1 blocks per lane in operation op, so the ends of
// a channel split the parts of a chunk differently (as ranks whose groups have
// different lane counts do), and a rank's split changes between kernels on the same
// stored counts.
// Byte i of rank `rank`'s message `msg` in operation `op`: the reference module's,
// unique per message and position as far as 8 bits allow (a chunk or part at the
// wrong offset does not match it; i * 131 alone repeated every 256 bytes).
uint8_t byteOf(int rank, int msg, size_t i, int op) {
  return static_cast<uint8_t>(verify::movedValue((op * KernelP2p::kMaxRanks + rank) * 4 + msg, i, ncclUint8));
}

struct P2pRun {
  bool weak = false, jitter = false, mixed = false, skipBarrier = false;
  int threads = 2;  // host threads a block
};

template <class P>
std::string runP2p(int n, int ops, const P2pRun& f) {
  const bool mixed = f.mixed;
  const int msgs = 4;
  const size_t sizes[msgs] = {3, (1 << 20) + 13, 65, 4001};
  std::vector<std::vector<uint64_t>> regions(n, std::vector<uint64_t>(KernelP2p::regionBytes(n) / 8));
  std::vector<std::vector<uint64_t>> counts(n, std::vector<uint64_t>(2 * KernelP2p::kMaxRanks * KernelP2p::kParts));
  std::vector<std::vector<std::vector<uint8_t>>> in(n), out(n);
  uint32_t words[2] = {0, 0};
  for (int r = 0; r < n; ++r)
    for (size_t size : sizes) in[r].emplace_back(size), out[r].emplace_back(size);
  for (int op = 0; op < ops; ++op) {
    for (int r = 0; r < n; ++r)
      for (int m = 0; m < msgs; ++m)
        for (size_t i = 0; i < sizes[m]; ++i) in[r][m][i] = byteOf(r, m, i, op);
    std::vector<KernelP2p> ks(n);
    for (int r = 0; r < n; ++r) {
      KernelP2p& k = ks[r];
      k.rank = r;
      k.n = n;
      if (mixed) k.blocksPerLane = (r + op) % 4 + 1;
      for (int m = 0; m < msgs; ++m) {  // receives first on odd ranks: lanes are not in call order
        k.add(r % 2 ? (r + n - 1) % n : (r + 1) % n, r % 2 == 0, reinterpret_cast<char*>((r % 2 ? out : in)[r][m].data()), sizes[m]);
        k.add(r % 2 ? (r + 1) % n : (r + n - 1) % n, r % 2 != 0, reinterpret_cast<char*>((r % 2 ? in : out)[r][m].data()), sizes[m]);
      }
      for (int q = 0; q < n; ++q) k.region[q] = reinterpret_cast<char*>(regions[q].data());
      k.counts = counts[r].data();
      k.stop = &words[0];
      k.error = &words[1];
      k.timeoutNs = 20000000000ull;
      k.skipBarrier = f.skipBarrier;
    }
    std::vector<std::unique_ptr<device::sim::SimBlock>> blocks;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < ks[r].blocks(); ++b) {
        blocks.push_back(std::make_unique<device::sim::SimBlock>(f.threads));
        for (int t = 0; t < f.threads; ++t)
          threads.emplace_back([&ks, &f, r, b, t, block = blocks.back().get()] {
            P p(ks[r], *block, t, f.jitter, f.weak);
            device::kernel::runP2pBlock(ks[r], p, b);
            p.barrierOr(0);
            p.publish();
          });
      }
    for (std::thread& t : threads) t.join();
    if (words[1]) return "a block gave up: error word " + std::to_string(words[1]);
    for (int r = 0; r < n; ++r)
      for (int m = 0; m < msgs; ++m)
        for (size_t i = 0; i < sizes[m]; ++i)
          if (out[r][m][i] != byteOf((r + n - 1) % n, m, i, op))
            return "op " + std::to_string(op) + ", rank " + std::to_string(r) + ", message " + std::to_string(m) +
                   ", byte " + std::to_string(i) + " differs";
  }
  return "";
}

TEST(KernelP2pProtocol, RingExchangeExactUnderWeakMemory) {
  P2pRun weak;
  weak.weak = true;
  for (int n : {2, 3, 4}) EXPECT_EQ(runP2p<device::sim::HostPrims>(n, 3, weak), "") << n << " ranks";
  weak.jitter = true;
  weak.threads = 4;
  EXPECT_EQ(runP2p<device::sim::HostPrims>(3, 2, weak), "") << "4 threads a block, jitter";
}

TEST(KernelP2pProtocol, EndsWithDifferentBlocksPerLaneStayInStep) {
  P2pRun mixed;
  mixed.weak = mixed.mixed = true;
  for (int n : {2, 3, 4}) EXPECT_EQ(runP2p<device::sim::HostPrims>(n, 3, mixed), "") << n << " ranks";
}

TEST(KernelP2pProtocol, WeakMemoryNeedsTheFence) {
  EXPECT_EQ(runP2p<NoFence>(3, 2, P2pRun{}), "");
  P2pRun weak;
  weak.weak = true;
  EXPECT_EQ(runP2p<NoFence>(3, 2, weak).rfind("op 0, ", 0), 0u);
}

// A chunk's flag raised without the barrier after the block's copy: another thread's
// part of the slot may not be stored yet (blocks are host threads with a real
// barrier; jitter lets the late thread be late, and weak memory holds its store past
// the fence that thread 0 issued without it).
TEST(KernelP2pProtocol, AMissingBarrierFails) {
  P2pRun f;
  f.skipBarrier = f.jitter = f.weak = true;
  f.threads = 4;
  EXPECT_NE(runP2p<device::sim::HostPrims>(3, 3, f), "");
}

// A receiver that reads a slot without acquiring its flag: the primitives' acquire
// made a no-op for data (loads see what the thread's view held at the kernel's start).
class NoAcquire : public device::sim::HostPrims {
 public:
  using HostPrims::HostPrims;
  uint64_t loadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
};

TEST(KernelP2pProtocol, WeakMemoryNeedsTheAcquire) {
  EXPECT_EQ(runP2p<NoAcquire>(3, 2, P2pRun{}), "");
  P2pRun weak;
  weak.weak = true;
  EXPECT_NE(runP2p<NoAcquire>(3, 2, weak), "");
}

// A send and its receive of different sizes: the receiver fails at its first chunk,
// naming the sender (the sender, whose chunks are never taken, would wait out the
// timeout; the first failure is the one recorded).
TEST(KernelP2pProtocol, ASizeMismatchFailsNamingTheSender) {
  std::vector<uint64_t> region0(KernelP2p::regionBytes(2) / 8), region1(KernelP2p::regionBytes(2) / 8);
  std::vector<uint64_t> counts0(2 * KernelP2p::kMaxRanks * KernelP2p::kParts), counts1(counts0.size());
  std::vector<char> in(5000), out(4000);
  uint32_t words[2] = {0, 0};
  KernelP2p k[2];
  for (int r = 0; r < 2; ++r) {
    k[r].rank = r;
    k[r].n = 2;
    k[r].region[0] = reinterpret_cast<char*>(region0.data());
    k[r].region[1] = reinterpret_cast<char*>(region1.data());
    k[r].counts = (r ? counts1 : counts0).data();
    k[r].stop = &words[0];
    k[r].error = &words[1];
    k[r].timeoutNs = 300000000ull;  // the sender's wait for its receiver
  }
  k[0].add(1, true, in.data(), in.size());
  k[1].add(0, false, out.data(), out.size());
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&k, r] {
      device::sim::SimBlock block(1);
      device::sim::HostPrims p(k[r], block, 0, false, false);
      for (int b = 0; b < k[r].blocks(); ++b) device::kernel::runP2pBlock(k[r], p, b);
    });
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(words[1] >> 8, static_cast<uint32_t>(device::KernelColl::kSizeMismatch));
  EXPECT_EQ(words[1] & 0xff, 0u);
}

}  // namespace
}  // namespace strata::test
