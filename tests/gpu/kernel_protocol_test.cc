// The device-driven protocols (device/kernel_coll.h, kernel_p2p.h) over the host primitives
// (device/sim_prims.h), with no GPU at all: ranks are threads, regions plain memory.
// Under weak memory a block's stores into peers' regions wait for a system fence;
// the protocol is exact there, and the same protocol without its fence is not.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"
#include "device/sim_prims.h"

namespace strata::test {
namespace {

using device::KernelColl;
using device::KernelP2p;

// The primitives with the fence before each flag left out, as a protocol that
// forgot it would run: ordering only, nothing held is published.
class NoFence : public device::sim::HostPrims {
 public:
  using HostPrims::HostPrims;
  void fenceSystem() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
};

struct Case {
  int coll, n;
  bool split;
  size_t count;  // elements of one rank's piece
};

// Rank q's input at element i in operation `op`: small integers, so sums are exact,
// different per element, rank and operation, so stale data shows.
float input(int q, size_t i, int op) { return static_cast<float>((i * 7 + q * 3 + op * 5) % 64); }

float expected(const Case& s, int r, size_t i, int op) {
  int from = static_cast<int>(i / s.count);
  switch (s.coll) {
    case KernelColl::kAllGather: case KernelColl::kGather: return input(from, i % s.count, op);
    case KernelColl::kAllToAll: return input(from, r * s.count + i % s.count, op);
    case KernelColl::kScatter: return input(s.n - 1, r * s.count + i, op);
    case KernelColl::kBroadcast: return input(s.n - 1, i, op);
    default: break;
  }
  size_t at = s.coll == KernelColl::kReduceScatter ? r * s.count + i : i;
  float sum = 0;
  for (int q = 0; q < s.n; ++q) sum += input(q, at, op);
  return sum;
}

// `ops` operations of `s` on ranks as threads, slots of 4 KiB (so several rounds
// and blocks); an empty string when every output is exact.
template <class P>
std::string run(const Case& s, bool weak, int ops) {
  const size_t slot = 4096;
  const bool gathers = s.coll == KernelColl::kAllGather || s.coll == KernelColl::kGather ||
                       s.coll == KernelColl::kAllToAll;
  const bool scatters = s.coll == KernelColl::kReduceScatter || s.coll == KernelColl::kScatter ||
                        s.coll == KernelColl::kAllToAll;
  const size_t inCount = scatters ? s.count * s.n : s.count, outCount = gathers ? s.count * s.n : s.count;
  std::vector<std::vector<uint64_t>> regions(s.n, std::vector<uint64_t>(KernelColl::regionBytes(s.n, slot) / 8));
  std::vector<std::vector<uint64_t>> counters(s.n, std::vector<uint64_t>(2));
  std::vector<std::vector<float>> in(s.n, std::vector<float>(inCount)), out(s.n, std::vector<float>(outCount));
  uint32_t words[2] = {0, 0};
  for (int op = 0; op < ops; ++op) {
    for (int q = 0; q < s.n; ++q)
      for (size_t i = 0; i < inCount; ++i) in[q][i] = input(q, i, op);
    std::vector<std::thread> ranks;
    for (int r = 0; r < s.n; ++r)
      ranks.emplace_back([&, r] {
        KernelColl k;
        k.coll = s.coll;
        k.split = s.split;
        k.rank = r;
        k.n = s.n;
        k.root = s.n - 1;
        k.send = reinterpret_cast<const char*>(in[r].data());
        k.recv = reinterpret_cast<char*>(out[r].data());
        k.count = s.count;
        k.slotBytes = slot;
        k.shapeRounds(1024);
        for (int q = 0; q < s.n; ++q) k.region[q] = reinterpret_cast<char*>(regions[q].data());
        k.counter = counters[r].data();
        k.stop = &words[0];
        k.error = &words[1];
        k.timeoutNs = 20000000000ull;
        P p(k, false, weak);
        for (int b = 0; b < k.blocks; ++b) {
          device::kernel::runBlock(k, p, b);
          p.publish();
        }
      });
    for (std::thread& t : ranks) t.join();
    if (words[1]) return "a block gave up: error word " + std::to_string(words[1]);
    for (int r = 0; r < s.n; ++r) {
      bool rootOnly = s.coll == KernelColl::kReduce || s.coll == KernelColl::kGather;
      if (rootOnly && r != s.n - 1) continue;  // only the root has a result
      for (size_t i = 0; i < outCount; ++i)
        if (out[r][i] != expected(s, r, i, op))
          return "op " + std::to_string(op) + ", rank " + std::to_string(r) + ", element " + std::to_string(i) +
                 ": " + std::to_string(out[r][i]) + ", expected " + std::to_string(expected(s, r, i, op));
    }
  }
  return "";
}

const Case kCases[] = {
    {KernelColl::kAllReduce, 2, false, 5000},     {KernelColl::kAllReduce, 4, true, 20011},
    {KernelColl::kAllGather, 3, false, 3001},     {KernelColl::kReduceScatter, 4, false, 3001},
    {KernelColl::kBroadcast, 2, false, 5000},     {KernelColl::kBroadcast, 4, true, 20011},
    {KernelColl::kReduce, 3, false, 5000},        {KernelColl::kReduce, 3, true, 20011},
    {KernelColl::kAllToAll, 4, false, 3001},      {KernelColl::kGather, 3, false, 3001},
    {KernelColl::kScatter, 4, false, 3001},
};

std::string name(const Case& s) {
  return "coll " + std::to_string(s.coll) + (s.split ? " two-shot" : " one-shot") + ", " + std::to_string(s.n) +
         " ranks";
}

TEST(KernelCollProtocol, ExactUnderWeakMemory) {
  for (const Case& s : kCases) EXPECT_EQ(run<device::sim::HostPrims>(s, true, 3), "") << name(s);
}

// The mode bites: the protocol without its fence is exact on plain host memory (the
// host's atomics hide the omission) and wrong under weak memory, every time (a block
// publishes only when it ends, after its peers read the early rounds).
TEST(KernelCollProtocol, WeakMemoryNeedsTheFence) {
  for (const Case& s : kCases) {
    EXPECT_EQ(run<NoFence>(s, false, 2), "") << name(s);
    EXPECT_EQ(run<NoFence>(s, true, 2).rfind("op 0, ", 0), 0u) << name(s);  // stale slots in the first operation
  }
}

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
uint8_t byteOf(int rank, int msg, size_t i, int op) { return static_cast<uint8_t>(i * 131 + rank * 17 + msg * 5 + op * 3); }

template <class P>
std::string runP2p(int n, bool weak, int ops, bool mixed = false) {
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
    }
    std::vector<std::thread> blocks;
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < ks[r].blocks(); ++b)
        blocks.emplace_back([&ks, r, b, weak] {
          P p(ks[r], false, weak);
          device::kernel::runP2pBlock(ks[r], p, b);
          p.publish();
        });
    for (std::thread& t : blocks) t.join();
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
  for (int n : {2, 3, 4}) EXPECT_EQ(runP2p<device::sim::HostPrims>(n, true, 3), "") << n << " ranks";
}

TEST(KernelP2pProtocol, EndsWithDifferentBlocksPerLaneStayInStep) {
  for (int n : {2, 3, 4}) EXPECT_EQ(runP2p<device::sim::HostPrims>(n, true, 3, true), "") << n << " ranks";
}

TEST(KernelP2pProtocol, WeakMemoryNeedsTheFence) {
  EXPECT_EQ(runP2p<NoFence>(3, false, 2), "");
  EXPECT_EQ(runP2p<NoFence>(3, true, 2).rfind("op 0, ", 0), 0u);
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
      device::sim::HostPrims p(k[r], false, false);
      for (int b = 0; b < k[r].blocks(); ++b) device::kernel::runP2pBlock(k[r], p, b);
    });
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(words[1] >> 8, static_cast<uint32_t>(KernelColl::kSizeMismatch));
  EXPECT_EQ(words[1] & 0xff, 0u);
}

}  // namespace
}  // namespace strata::test
