// The pipelined collective kernel's protocol (device/kernel_pipe.h) on host threads,
// with no GPU and no communicator: every collective on the ring and on the mesh,
// ranks as threads, each block several threads with a real barrier, several
// operations in a row on small slots (many messages per FIFO, counts carried from
// one operation to the next), checked exactly against the reference data; the mesh's
// LL protocol (device/kernel_ll.h) likewise; and the faults the protocols must not
// survive: a barrier left out, a flag raised before its fence (weak memory), an LL
// unit taken on one line's flags.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device/dtypes.h"
#include "device/kernel_pipe.h"
#include "device/sim_pipe.h"
#include "verify/reference.h"

namespace strata::device {
namespace {

using verify::TestOp;
using K = KernelColl;

struct Case {
  int coll, algo, n;
  size_t count;  // elements of one rank's piece
  ncclDataType_t type = ncclFloat32;
  TestOp op = TestOp::kSum;
  int root = 0;
};

std::string describe(const Case& c) {
  static const char* colls[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AlltoAll", "Gather", "Scatter"};
  static const char* algos[] = {" ring", " mesh", " mesh LL"};
  return std::string(colls[c.coll]) + algos[c.algo] + " n=" + std::to_string(c.n) +
         " count=" + std::to_string(c.count) + " " + dtypeName(c.type) + " " + verify::opName(c.op) + " root " +
         std::to_string(c.root);
}

bool reduces(int coll) { return coll == K::kAllReduce || coll == K::kReduceScatter || coll == K::kReduce; }
bool wideIn(int coll) { return coll == K::kReduceScatter || coll == K::kAllToAll || coll == K::kScatter; }
bool wideOut(int coll) { return coll == K::kAllGather || coll == K::kAllToAll || coll == K::kGather; }

ReduceOp reduceOp(TestOp op, ncclDataType_t type, int n) {
  ReduceOp r;
  static const ReduceKind kinds[] = {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMax, ReduceKind::kMin};
  r.kind = op <= TestOp::kMin ? kinds[static_cast<int>(op)] : ReduceKind::kSum;
  if (op == TestOp::kAvg) r.postDivide = n;
  if (op == TestOp::kPreMulHost || op == TestOp::kPreMulDevice) {
    auto s = verify::makeBuffer(type, 1, [](size_t) { return verify::kPreMulScalar; });
    r.preMultiply = true;
    loadScalar(s.data(), type, &r);
  }
  return r;
}

// Operation `op`'s data: its own positions of the reference data.
constexpr size_t kOpStride = 1 << 22;
double input(const Case& c, int rank, size_t i, int op) {
  size_t at = i + op * kOpStride;
  if (reduces(c.coll)) return verify::inputValue(c.n, rank, at, c.type, c.op);
  return verify::movedValue(rank, at, c.type);
}
double expected(const Case& c, int rank, size_t i, int op) {
  size_t piece = i / c.count, j = i % c.count;
  switch (c.coll) {
    case K::kAllGather: case K::kGather: return input(c, static_cast<int>(piece), j, op);
    case K::kAllToAll: return input(c, static_cast<int>(piece), rank * c.count + j, op);
    case K::kScatter: return input(c, c.root, rank * c.count + i, op);
    case K::kBroadcast: return input(c, c.root, i, op);
    default: break;
  }
  size_t at = (c.coll == K::kReduceScatter ? rank * c.count + i : i) + op * kOpStride;
  return verify::reducedValue(c.n, at, c.type, c.op);
}

struct Fault {
  bool skipBarrier = false, relaxedFlag = false, skipAcquire = false, llOneFlag = false, weak = false, jitter = false;
};

// `ops` operations of `c`, ranks as threads; "" when every output is exact.
std::string run(const Case& c, int ops, const Fault& f = {}, int threads = 2) {
  const int channels = 3, depth = 3, conns = c.algo == KernelPipe::kRing ? 1 : c.n;
  const size_t slot = 4096, es = dtypeSize(c.type);
  const size_t inCount = wideIn(c.coll) ? c.count * c.n : c.count, outCount = wideOut(c.coll) ? c.count * c.n : c.count;
  const size_t part = 4096;  // the poison word's page first, as the algorithms lay regions out
  const bool ll = c.algo == KernelPipe::kMeshLL;
  size_t regionBytes = part + (ll ? ll::regionBytes(channels, c.n) : KernelPipe::regionBytes(channels, conns, depth, slot));
  std::vector<std::vector<uint64_t>> regions(c.n, std::vector<uint64_t>(regionBytes / 8));
  std::vector<std::vector<uint64_t>> state(
      c.n, std::vector<uint64_t>(ll ? ll::stateWords(channels) : KernelPipe::stateWords(channels, conns)));
  std::vector<std::vector<char>> in(c.n), out(c.n);
  uint32_t stop = 0;
  std::vector<uint32_t> error(c.n, 0);
  for (int op = 0; op < ops; ++op) {
    for (int r = 0; r < c.n; ++r) {
      in[r] = verify::makeBuffer(c.type, inCount, [&](size_t i) { return input(c, r, i, op); });
      out[r].assign(outCount * es + 1, 0x5a);  // poisoned
    }
    std::vector<std::thread> ranks;
    for (int r = 0; r < c.n; ++r)
      ranks.emplace_back([&, r] {
        KernelPipe k;
        k.coll = c.coll;
        k.algo = c.algo;
        k.rank = r;
        k.n = c.n;
        k.root = c.root;
        k.channels = channels;
        k.blocks = op % 2 ? 1 : channels;  // as a small operation between large ones: the other channels' counts wait
        k.part = part;
        k.type = c.type;
        k.es = static_cast<int>(es);
        k.op = reduceOp(c.op, c.type, c.n);
        k.send = in[r].data();
        k.recv = out[r].data();
        k.count = c.count;
        k.depth = depth;
        k.slotBytes = slot;
        k.conns = conns;
        auto regionOf = [&](int q) { return reinterpret_cast<char*>(regions[q].data()); };
        if (c.algo == KernelPipe::kRing) {
          k.region[KernelPipe::kSelf] = regionOf(r);
          k.region[KernelPipe::kPrev] = regionOf((r + c.n - 1) % c.n);
          k.region[KernelPipe::kNext] = regionOf((r + 1) % c.n);
        } else {
          for (int q = 0; q < c.n; ++q) k.region[q] = regionOf(q);
        }
        k.state = state[r].data();
        k.stop = &stop;
        k.error = &error[r];
        k.timeoutNs = 20000000000ull;
        k.skipBarrier = f.skipBarrier;
        k.relaxedFlag = f.relaxedFlag;
        k.skipAcquire = f.skipAcquire;
        k.llOneFlag = f.llOneFlag;
        std::vector<std::unique_ptr<sim::PipeBlock>> blocks;
        for (int b = 0; b < k.blocks; ++b) blocks.push_back(std::make_unique<sim::PipeBlock>(threads));
        std::vector<std::thread> running;
        for (int b = 0; b < k.blocks; ++b)
          for (int t = 0; t < threads; ++t)
            running.emplace_back([&, b, t] {
              sim::PipePrims p(k, *blocks[b], t, f.jitter, f.weak);
              blocks[b]->barrier(0);
              sim::runBlock(k, p, *blocks[b], b);
            });
        for (std::thread& t : running) t.join();
        for (auto& b : blocks) b->publish();
      });
    for (std::thread& t : ranks) t.join();
    for (int r = 0; r < c.n; ++r)
      if (error[r]) return "rank " + std::to_string(r) + " gave up: error word " + std::to_string(error[r]);
    for (int r = 0; r < c.n; ++r) {
      bool rootOnly = c.coll == K::kReduce || c.coll == K::kGather;
      if (rootOnly && r != c.root) continue;
      auto want = verify::makeBuffer(c.type, outCount, [&](size_t i) { return expected(c, r, i, op); });
      std::string e = verify::compareBuffers(c.type, out[r].data(), want.data(), outCount,
                                             describe(c) + ", op " + std::to_string(op) + ", rank " + std::to_string(r));
      if (!e.empty()) return e;
    }
  }
  return "";
}

TEST(PipeProtocol, RingCollectivesAreExact) {
  for (const Case& c : {Case{K::kAllReduce, KernelPipe::kRing, 2, 20011}, Case{K::kAllReduce, KernelPipe::kRing, 3, 5003},
                        Case{K::kAllReduce, KernelPipe::kRing, 4, 20011, ncclBfloat16},
                        Case{K::kAllReduce, KernelPipe::kRing, 8, 40007, ncclFloat32, TestOp::kAvg},
                        Case{K::kAllReduce, KernelPipe::kRing, 4, 3001, ncclInt32, TestOp::kPreMulDevice},
                        Case{K::kAllReduce, KernelPipe::kRing, 3, 1, ncclFloat64, TestOp::kMax},
                        Case{K::kAllGather, KernelPipe::kRing, 3, 3001}, Case{K::kAllGather, KernelPipe::kRing, 4, 1, ncclInt8},
                        Case{K::kReduceScatter, KernelPipe::kRing, 4, 3001, ncclFloat16, TestOp::kProd},
                        Case{K::kReduceScatter, KernelPipe::kRing, 2, 7001, ncclUint8},
                        Case{K::kBroadcast, KernelPipe::kRing, 4, 20011, ncclFloat32, TestOp::kSum, 2},
                        Case{K::kReduce, KernelPipe::kRing, 3, 20011, ncclFloat32, TestOp::kMin, 1},
                        Case{K::kReduce, KernelPipe::kRing, 5, 4099, ncclFloat8e4m3, TestOp::kSum, 4}})
    EXPECT_EQ(run(c, 3), "") << describe(c);
}

TEST(PipeProtocol, MeshCollectivesAreExact) {
  for (const Case& c : {Case{K::kAllReduce, KernelPipe::kMesh, 2, 20011}, Case{K::kAllReduce, KernelPipe::kMesh, 4, 20011},
                        Case{K::kAllReduce, KernelPipe::kMesh, 8, 40007, ncclBfloat16, TestOp::kAvg},
                        Case{K::kAllReduce, KernelPipe::kMesh, 3, 5, ncclInt64, TestOp::kPreMulHost},
                        Case{K::kAllGather, KernelPipe::kMesh, 3, 3001}, Case{K::kReduceScatter, KernelPipe::kMesh, 4, 3001},
                        Case{K::kBroadcast, KernelPipe::kMesh, 4, 9001, ncclFloat32, TestOp::kSum, 1},
                        Case{K::kReduce, KernelPipe::kMesh, 3, 9001, ncclFloat16, TestOp::kMax, 2},
                        Case{K::kAllToAll, KernelPipe::kMesh, 4, 3001}, Case{K::kGather, KernelPipe::kMesh, 3, 3001, ncclFloat32, TestOp::kSum, 1},
                        Case{K::kScatter, KernelPipe::kMesh, 4, 3001, ncclFloat32, TestOp::kSum, 3}})
    EXPECT_EQ(run(c, 3), "") << describe(c);
}

// LL: one-unit messages and many rounds (a round of a channel is 512 units: 2048
// floats), odd counts and tails, every op kind and a 1-, 2- and 8-byte type.
TEST(PipeProtocol, LLCollectivesAreExact) {
  const int L = KernelPipe::kMeshLL;
  for (const Case& c : {Case{K::kAllReduce, L, 2, 1}, Case{K::kAllReduce, L, 2, 20011}, Case{K::kAllReduce, L, 4, 7},
                        Case{K::kAllReduce, L, 8, 40007, ncclBfloat16, TestOp::kAvg},
                        Case{K::kAllReduce, L, 3, 5, ncclInt64, TestOp::kPreMulHost},
                        Case{K::kAllReduce, L, 4, 9001, ncclInt8, TestOp::kMax},
                        Case{K::kAllReduce, L, 3, 3001, ncclFloat16, TestOp::kProd},
                        Case{K::kAllReduce, L, 4, 3001, ncclFloat32, TestOp::kPreMulDevice},
                        Case{K::kAllGather, L, 3, 3001}, Case{K::kAllGather, L, 4, 1, ncclInt8},
                        Case{K::kAllGather, L, 8, 5003, ncclFloat64},
                        Case{K::kReduceScatter, L, 4, 3001, ncclFloat32, TestOp::kMin},
                        Case{K::kReduceScatter, L, 2, 7001, ncclUint8}, Case{K::kReduceScatter, L, 5, 3, ncclFloat8e4m3}})
    EXPECT_EQ(run(c, 3), "") << describe(c);
}

TEST(PipeProtocol, ExactUnderWeakMemoryAndJitter) {
  Fault harsh;
  harsh.weak = harsh.jitter = true;
  EXPECT_EQ(run({K::kAllReduce, KernelPipe::kRing, 4, 20011}, 2, harsh, 3), "");
  EXPECT_EQ(run({K::kAllReduce, KernelPipe::kMesh, 4, 20011}, 2, harsh, 3), "");
  EXPECT_EQ(run({K::kAllToAll, KernelPipe::kMesh, 3, 7001}, 2, harsh, 3), "");
  EXPECT_EQ(run({K::kAllReduce, KernelPipe::kMeshLL, 4, 20011}, 3, harsh, 3), "");
  EXPECT_EQ(run({K::kReduceScatter, KernelPipe::kMeshLL, 3, 3001, ncclBfloat16}, 3, harsh, 2), "");
}

// The weak-memory model's stale loads, directly: a reader sees a publish only once
// it acquired the word released after it (or a barrier passed it on).
TEST(Visibility, ALoadSeesWhatItsLastAcquireSynchronisedWith) {
  namespace v = sim::visibility;
  std::vector<char> slot(64, 'a'), seen(64);
  uint64_t flag = 0, other = 0;
  v::Reader r, late;
  v::join(&r);
  v::land(slot.data() + 8, std::string(16, 'b').data(), 16);
  v::land(slot.data() + 16, std::string(16, 'c').data(), 16);
  v::released(&flag);
  v::read(seen.data(), slot.data(), 64, r);
  EXPECT_EQ(std::string(seen.data(), 64), std::string(64, 'a'));  // nothing acquired: the old bytes
  v::acquired(&r, &other, other);                                   // a word no release raised
  v::read(seen.data(), slot.data(), 64, r);
  EXPECT_EQ(std::string(seen.data(), 64), std::string(64, 'a'));
  v::join(&late);  // a reader that begins now sees what came before it
  v::read(seen.data(), slot.data(), 64, late);
  EXPECT_EQ(std::string(seen.data(), 64), std::string(8, 'a') + std::string(8, 'b') + std::string(16, 'c') + std::string(32, 'a'));
  v::acquired(&r, &flag, flag);
  v::read(seen.data(), slot.data(), 64, r);
  EXPECT_EQ(std::string(seen.data(), 64), std::string(8, 'a') + std::string(8, 'b') + std::string(16, 'c') + std::string(32, 'a'));
  v::land(slot.data(), std::string(4, 'd').data(), 4);  // after the acquire: unseen until the next
  v::read(seen.data(), slot.data(), 4, r);
  EXPECT_EQ(std::string(seen.data(), 4), "aaaa");
  v::raise(&r, late.epoch + 1);  // a barrier passed on a newer view
  v::read(seen.data(), slot.data(), 4, r);
  EXPECT_EQ(std::string(seen.data(), 4), "dddd");
  v::leave(&r);
  v::leave(&late);
  EXPECT_EQ(v::recordedBytes(), 0u);
}

// The faults the strict simulator must expose: each makes the same run wrong.
TEST(PipeProtocol, AMissingBarrierFails) {
  Fault f;
  f.skipBarrier = f.jitter = true;
  EXPECT_NE(run({K::kAllReduce, KernelPipe::kRing, 4, 40007}, 3, f, 4), "");
}

// An LL reader that trusts a unit once its first line arrived reads the second line's
// previous use (weak memory lets the lines land in any order).
TEST(PipeProtocol, AnLLUnitReadOnOneFlagFailsUnderWeakMemory) {
  Fault f;
  f.llOneFlag = f.weak = f.jitter = true;
  EXPECT_NE(run({K::kAllReduce, KernelPipe::kMeshLL, 4, 20011}, 3, f, 2), "");
}

TEST(PipeProtocol, ARelaxedFlagFailsUnderWeakMemory) {
  Fault f;
  f.relaxedFlag = f.weak = f.jitter = true;
  EXPECT_NE(run({K::kAllReduce, KernelPipe::kRing, 4, 40007}, 3, f, 2), "");
}

// A reader that trusts its relaxed poll of the ready flag, with no acquire after it,
// may be served the slot's previous contents (weak memory: loads see what was
// published as of the thread's last acquire). Without jitter, so the stale view is
// the model's doing and not a race's.
TEST(PipeProtocol, AMissingAcquireFailsUnderWeakMemory) {
  Fault f;
  f.skipAcquire = f.weak = true;
  EXPECT_NE(run({K::kAllReduce, KernelPipe::kRing, 4, 20011}, 2, f, 2), "");
  EXPECT_NE(run({K::kAllGather, KernelPipe::kMesh, 3, 3001}, 2, f, 2), "");
  f.skipAcquire = false;  // the same runs with the acquire are exact
  EXPECT_EQ(run({K::kAllReduce, KernelPipe::kRing, 4, 20011}, 2, f, 2), "");
  EXPECT_EQ(run({K::kAllGather, KernelPipe::kMesh, 3, 3001}, 2, f, 2), "");
  EXPECT_EQ(sim::visibility::recordedBytes(), 0u);  // no kernel runs: nothing kept
}

}  // namespace
}  // namespace strata::device
