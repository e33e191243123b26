// DeviceDriven: small collectives on device buffers as one kernel on the caller's
// stream, ranks on GPUs of their own (part of gpu_test; label "gpu", and on
// simulated GPUs with 4 and 8 of them and with one hardware queue). A CUDA graph
// captured once replays exactly with eager calls in between. How the kernels fail is
// device_faults_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <memory>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "device/gpu.h"
#include "device/kernel_ll.h"
#include "verify/reference.h"
#include "gpu/gpu_util.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

// 20000 floats: 80 KB, three blocks of the kernel.
constexpr size_t kCount = 20000;

// Rank r of n's input in round k: round k's own positions of the reference data.
std::vector<float> inputOf(int n, int rank, int round) { return refInput(n, rank, kCount, round * kCount); }

// The all-reduce (sum) of round k's inputs over n ranks, each input times 2^`scaleExp`
// (a power of two: every partial sum stays exact).
std::string checkSum(const void* dev, int n, int round, const std::string& what, int scaleExp = 0) {
  std::vector<float> want = refSum(n, kCount, round * kCount);
  for (float& x : want) x = std::ldexp(x, scaleExp);
  return compareFloats(downloadFloats(dev, kCount), want, what);
}

void put(void* dev, const std::vector<float>& v) { device::copySync(dev, v.data(), v.size() * sizeof(float)); }

// Captured once (all-reduce, then all-gather of the result's first elements, then an
// all-reduce pre-multiplied by a scalar in device memory), replayed five times on new
// inputs and scalars with an eager all-reduce between replays: every replay advances
// the step count in device memory, so the ranks stay in step, and reads the scalar anew.
std::string graphRank(int rank, int n, const ncclUniqueId& id) {
  return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
    DeviceBuffer in(kCount * sizeof(float)), out(kCount * sizeof(float)), eager(kCount * sizeof(float));
    DeviceBuffer gathered(n * 16 * sizeof(float)), scaled(kCount * sizeof(float)), scalar(sizeof(float));
    put(scalar.p, {1.0f});
    ncclRedOp_t premul;
    if (ncclRedOpCreatePreMulSum(&premul, scalar.p, ncclFloat32, ncclScalarDevice, comm) != ncclSuccess)
      return "ncclRedOpCreatePreMulSum failed";
    put(in.p, inputOf(n, rank, 0));
    if (ncclAllReduce(in.p, eager.p, kCount, ncclFloat32, ncclSum, comm, s) != ncclSuccess) return "eager all-reduce failed";
    device::streamSynchronize(s);
    std::string err = checkSum(eager.p, n, 0, "eager round 0");
    if (!err.empty()) return err;
    device::graphBegin(s);
    ncclResult_t r1 = ncclAllReduce(in.p, out.p, kCount, ncclFloat32, ncclSum, comm, s);
    ncclResult_t r2 = ncclAllGather(in.p, gathered.p, 16, ncclFloat32, comm, s);
    if (r2 == ncclSuccess) r2 = ncclAllReduce(in.p, scaled.p, kCount, ncclFloat32, premul, comm, s);
    std::string why;
    void* graph = device::graphEnd(s, &why);
    if (r1 != ncclSuccess || r2 != ncclSuccess) return std::string("capture refused: ") + ncclGetLastError(comm);
    if (!graph) return "capture failed: " + why;
    for (int round = 1; round <= 5 && err.empty(); ++round) {
      put(in.p, inputOf(n, rank, round));
      put(scalar.p, {std::ldexp(1.0f, round)});
      device::graphLaunch(graph, s);
      if (round == 3 && ncclAllReduce(in.p, eager.p, kCount, ncclFloat32, ncclSum, comm, s) != ncclSuccess)
        err = "eager all-reduce between replays failed";
      device::streamSynchronize(s);
      if (err.empty()) err = checkSum(out.p, n, round, "replay " + std::to_string(round));
      if (err.empty()) err = checkSum(scaled.p, n, round, "replay " + std::to_string(round) + " pre-multiplied", round);
      if (err.empty() && round == 3) err = checkSum(eager.p, n, 3, "eager all-reduce between replays");
      std::vector<std::vector<float>> firsts;  // every rank's first 16 inputs of the round
      for (int r = 0; r < n; ++r) firsts.push_back(refInput(n, r, 16, round * kCount));
      if (err.empty())
        err = compareFloats(downloadFloats(gathered.p, n * 16), concat(firsts), "replay " + std::to_string(round) + " all-gather");
    }
    device::graphDestroy(graph);
    ncclRedOpDestroy(premul, comm);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    return err.empty() && async != ncclSuccess ? "async error " + std::to_string(async) : err;
  });
}

class DeviceDriven : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(DeviceDriven, AGraphCapturedOnceReplaysExactly) {
  auto [mode, n] = GetParam();
  REQUIRE_GPUS(n);
  EXPECT_EQ(failures(runRanks(mode, n, graphRank, 300)), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeviceDriven,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses), ::testing::Values(2, 4, 8)),
                         [](const auto& info) {
                           return std::string(modeName(std::get<0>(info.param))) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Sends and receives as one kernel per group: every rank sends 3 MiB (24 chunks,
// six times the slots) and 80 KB to the next rank and receives as much from the
// previous one; the group is captured once and replayed with new inputs, an eager
// group between replays, and the ranks' chunk counts stay in step.
std::string p2pRank(int rank, int n, const ncclUniqueId& id) {
  return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
    const size_t big = (3 << 20) / sizeof(float);
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    DeviceBuffer in(big * sizeof(float)), out(big * sizeof(float)), in2(kCount * sizeof(float)), out2(kCount * sizeof(float));
    auto group = [&]() -> bool {
      bool ok = ncclGroupStart() == ncclSuccess;  // per direction in the same order on both ends, as NCCL matches them
      ok = ok && ncclRecv(out.p, big, ncclFloat32, prev, comm, s) == ncclSuccess;
      ok = ok && ncclSend(in.p, big, ncclFloat32, next, comm, s) == ncclSuccess;
      ok = ok && ncclSend(in2.p, kCount, ncclFloat32, next, comm, s) == ncclSuccess;
      ok = ok && ncclRecv(out2.p, kCount, ncclFloat32, prev, comm, s) == ncclSuccess;
      return ncclGroupEnd() == ncclSuccess && ok;
    };
    auto check = [&](int round) -> std::string {
      std::vector<float> got(big), got2(kCount);
      device::copySync(got.data(), out.p, big * sizeof(float));
      device::copySync(got2.data(), out2.p, kCount * sizeof(float));
      std::string e = compareFloats(got, refMoved(prev, big, round * big), "round " + std::to_string(round) + ", the 3 MiB message");
      if (!e.empty()) return e;
      return compareFloats(got2, refMoved(100 + prev, kCount, round * kCount), "round " + std::to_string(round) + ", the 80 KB message");
    };
    auto fill = [&](int round) {
      put(in.p, refMoved(rank, big, round * big));
      put(in2.p, refMoved(100 + rank, kCount, round * kCount));
    };
    fill(0);
    if (!group()) return "eager group refused";
    device::streamSynchronize(s);
    std::string err = check(0);
    std::string refused;
    void* graph = captureGroup(s, comm, group, &refused);
    if (!graph) return refused;
    for (int round = 1; round <= 4 && err.empty(); ++round) {
      fill(round);
      if (round == 3) {  // eager, between replays
        if (!group()) err = "eager group between replays refused";
        device::streamSynchronize(s);
        if (err.empty()) err = check(round);
      }
      if (err.empty()) device::graphLaunch(graph, s);
      device::streamSynchronize(s);
      if (err.empty()) err = check(round);
    }
    device::graphDestroy(graph);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    return err.empty() && async != ncclSuccess ? "async error " + std::to_string(async) : err;
  });
}

class DeviceDrivenP2p : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(DeviceDrivenP2p, ARingExchangeCapturedOnceReplaysExactly) {
  auto [mode, n] = GetParam();
  REQUIRE_GPUS(n);
  EXPECT_EQ(failures(runRanks(mode, n, p2pRank, 300)), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeviceDrivenP2p,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses), ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return std::string(modeName(std::get<0>(info.param))) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Simulated GPUs that run `blocks` blocks at once (STRATA_GPU_SIM_BLOCKS), for `body`.
template <typename F>
void withBlocksAtOnce(const char* blocks, F body) {
  setenv("STRATA_GPU_SIM_BLOCKS", blocks, 1);
  setenv("STRATA_TIMEOUT", "20", 1);
  reloadEnvironment();
  body();
  unsetenv("STRATA_GPU_SIM_BLOCKS");
  unsetenv("STRATA_TIMEOUT");
  reloadEnvironment();
}

// GPUs that run four blocks at once, two of them for a communicator's point-to-point
// kernel: a ring exchange's two lanes (receive from the previous rank, send to the
// next) at four blocks each would start only part of the first lane, every rank's
// receives waiting for sends that never start (the messages outgrow the slots; strict
// mode refuses the grid outright). A block per lane fits, and the exchange goes
// through, captured in a graph as only the device-driven path allows.
TEST(DeviceDrivenP2pRoom, ARingExchangeFitsAGpuThatRunsFourBlocksAtOnce) {
  REQUIRE_GPUS(2);
  if (!simulated()) GTEST_SKIP() << "sets the simulated GPUs' size";
  withBlocksAtOnce("4", [] {
    EXPECT_EQ(failures(runRanks(Mode::kThreads, 2, p2pRank, 300)), "");
    EXPECT_EQ(failures(runRanks(Mode::kProcesses, 2, p2pRank, 300)), "");
  });
}

// Rank 0's GPU runs two blocks at once, rank 1's the default: too few on rank 0 for a
// block per lane of a group that may send to and receive from every peer, so on both
// ranks (every rank plans with the fewest any GPU holds) sends and receives go
// through the proxy, which refuses graph capture, rather than one rank launching a
// kernel its peer never meets.
TEST(DeviceDrivenP2pRoom, ARankWhoseGpuHoldsTooFewBlocksKeepsEveryRankOnTheProxy) {
  REQUIRE_GPUS(2);
  if (!simulated()) GTEST_SKIP() << "sets the simulated GPUs' size";
  auto results = runRanks(Mode::kProcesses, 2, p2pRank, 120, [](int rank) {
    if (rank == 0) setenv("STRATA_GPU_SIM_BLOCKS", "2", 1);
    reloadEnvironment();
    return std::string();
  });
  ASSERT_EQ(results.size(), 2u);
  for (const RankResult& r : results)
    EXPECT_NE(r.error.find("capture refused"), std::string::npos) << "rank " << r.rank << ": " << r.error;
}

TEST(DeviceDrivenStreams, TheLegacyStreamToo) {
  REQUIRE_GPUS(2);
  auto results = runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(rank);
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return "init failed";
    std::string err;
    for (size_t count : {kCount, size_t{3} << 20}) {
      DeviceBuffer buf(count * sizeof(float));
      std::vector<float> mine = refInput(n, rank, count), got(count);
      device::copyAsync(buf.p, mine.data(), count * sizeof(float), nullptr);
      if (ncclAllReduce(buf.p, buf.p, count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess) err = "not enqueued";
      device::copyAsync(got.data(), buf.p, count * sizeof(float), nullptr);
      device::streamSynchronize(nullptr);
      if (err.empty()) err = compareFloats(got, refSum(n, count), std::to_string(count) + " floats on stream 0");
    }
    ncclCommDestroy(comm);
    return err;
  });
  EXPECT_EQ(failures(results), "");
}

// NCCL ignores a non-root's output of a reduce or gather, which may be null: those
// ranks still take the kernel with the root (deciding by an unused pointer sent them
// to the proxy while the root waited in its kernel).
TEST(DeviceDrivenStreams, ANonRootsOutputMayBeNull) {
  REQUIRE_GPUS(3);
  auto results = runRanks(Mode::kThreads, 3, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
      const int root = 1;
      DeviceBuffer in(kCount * sizeof(float)), out(n * kCount * sizeof(float));
      put(in.p, inputOf(n, rank, 0));
      void* dst = rank == root ? out.p : nullptr;
      if (ncclReduce(in.p, dst, kCount, ncclFloat32, ncclSum, root, comm, s) != ncclSuccess) return "reduce refused";
      device::streamSynchronize(s);
      std::string err = rank == root ? checkSum(out.p, n, 0, "reduce") : "";
      if (!err.empty()) return err;
      if (ncclGather(in.p, dst, kCount, ncclFloat32, root, comm, s) != ncclSuccess) return "gather refused";
      device::streamSynchronize(s);
      if (rank != root) return "";
      std::vector<float> got(n * kCount);
      device::copySync(got.data(), out.p, got.size() * sizeof(float));
      for (int q = 0; q < n; ++q)
        if (auto e = compareFloats(std::vector<float>(got.begin() + q * kCount, got.begin() + (q + 1) * kCount),
                                   inputOf(n, q, 0), "gather: rank " + std::to_string(q) + "'s piece");
            !e.empty())
          return e;
      return "";
    });
  }, 120);
  EXPECT_EQ(failures(results), "");
}

// A communicator's calls alternate between two streams the caller never orders: its
// kernels share the step count, flags and slots, so each waits for the one before.
TEST(DeviceDrivenStreams, CallsOnTwoStreamsRunInCallOrder) {
  REQUIRE_GPUS(2);
  auto results = runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t a) -> std::string {
      void* b = device::streamCreate();
      const int calls = 8;
      std::vector<std::unique_ptr<DeviceBuffer>> in, out;
      for (int i = 0; i < calls; ++i) {
        in.push_back(std::make_unique<DeviceBuffer>(kCount * sizeof(float)));
        out.push_back(std::make_unique<DeviceBuffer>(kCount * sizeof(float)));
        put(in[i]->p, inputOf(n, rank, i));
      }
      std::string err;
      for (int i = 0; i < calls && err.empty(); ++i)
        if (ncclAllReduce(in[i]->p, out[i]->p, kCount, ncclFloat32, ncclSum, comm, i % 2 ? static_cast<cudaStream_t>(b) : a) !=
            ncclSuccess)
          err = "call " + std::to_string(i) + " was not enqueued";
      device::streamSynchronize(a);
      device::streamSynchronize(b);
      for (int i = 0; i < calls && err.empty(); ++i) err = checkSum(out[i]->p, n, i, "call " + std::to_string(i));
      device::streamDestroy(b);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm, &async);
      return err.empty() && async != ncclSuccess ? "async error " + std::to_string(async) : err;
    });
  });
  EXPECT_EQ(failures(results), "");
}

// The pipelined kernel alone, without a communicator: n virtual ranks on one GPU,
// each kernel on a stream of its own with its own region, counts and buffers (their
// grids fit the GPU together: a few channels each). On a real GPU this runs the PTX
// primitives and the protocol on one device, HBM where NVLink would be; on simulated
// GPUs the same code on host threads.
struct VirtualRank {
  DeviceBuffer region, state, in, out;
  void* stream;
  VirtualRank(size_t regionBytes, size_t stateBytes, size_t inBytes, size_t outBytes)
      : region(regionBytes), state(stateBytes), in(inBytes), out(outBytes), stream(device::streamCreate()) {
    device::memsetSync(region.p, 0, regionBytes);
    device::memsetSync(state.p, 0, stateBytes);
    device::memsetSync(out.p, 0x5a, outBytes);
  }
  ~VirtualRank() { device::streamDestroy(stream); }
};

using device::KernelPipe;
using KC = device::KernelColl;

bool reduces(int coll) { return coll == KC::kAllReduce || coll == KC::kReduceScatter || coll == KC::kReduce; }
bool wideIn(int coll) { return coll == KC::kReduceScatter || coll == KC::kAllToAll || coll == KC::kScatter; }
bool wideOut(int coll) { return coll == KC::kAllGather || coll == KC::kAllToAll || coll == KC::kGather; }

// Operation `op`'s data: its own positions of the reference data (the root is the last rank).
constexpr size_t kOpStride = 1 << 24;
float virtualInput(int coll, int n, int r, size_t i, int op) {
  size_t at = i + static_cast<size_t>(op) * kOpStride;
  if (reduces(coll)) return static_cast<float>(verify::inputValue(n, r, at, ncclFloat32, verify::TestOp::kSum));
  return static_cast<float>(verify::movedValue(r, at, ncclFloat32));
}
float virtualWant(int coll, int n, int r, size_t i, size_t count, int op) {
  size_t piece = i / count, j = i % count;
  switch (coll) {
    case KC::kAllGather: case KC::kGather: return virtualInput(coll, n, static_cast<int>(piece), j, op);
    case KC::kAllToAll: return virtualInput(coll, n, static_cast<int>(piece), r * count + j, op);
    case KC::kScatter: return virtualInput(coll, n, n - 1, r * count + i, op);
    case KC::kBroadcast: return virtualInput(coll, n, n - 1, i, op);
    default: break;
  }
  size_t at = (coll == KC::kReduceScatter ? r * count + i : i) + static_cast<size_t>(op) * kOpStride;
  return static_cast<float>(verify::reducedValue(n, at, ncclFloat32, verify::TestOp::kSum));
}

// `graphs`: each rank's kernel is captured once, in a CUDA graph, and every later
// operation replays it (the counts in device memory move the FIFOs along).
std::string virtualRanks(int n, int coll, int algo, size_t count, int ops, bool graphs = false) {
  const int channels = 4, depth = 4, conns = algo == KernelPipe::kRing ? 1 : n;
  const bool ll = algo == KernelPipe::kMeshLL;
  const size_t slot = 64 << 10, part = 4096;
  const size_t regionBytes =
      part + (ll ? device::ll::regionBytes(channels, n) : KernelPipe::regionBytes(channels, conns, depth, slot));
  const size_t stateWords = ll ? device::ll::stateWords(channels) : KernelPipe::stateWords(channels, conns);
  const size_t inCount = wideIn(coll) ? count * n : count, outCount = wideOut(coll) ? count * n : count;
  auto* words = static_cast<uint32_t*>(device::pinnedAlloc(8));
  words[0] = words[1] = 0;
  std::vector<std::unique_ptr<VirtualRank>> ranks;
  for (int r = 0; r < n; ++r)
    ranks.push_back(std::make_unique<VirtualRank>(regionBytes, stateWords * 8,
                                                  inCount * sizeof(float), outCount * sizeof(float)));
  std::string err;
  std::vector<void*> graph(n, nullptr);
  for (int op = 0; op < ops && err.empty(); ++op) {
    for (int r = 0; r < n; ++r) {
      std::vector<float> input(inCount);
      for (size_t i = 0; i < inCount; ++i) input[i] = virtualInput(coll, n, r, i, op);
      put(ranks[r]->in.p, input);
      if (graph[r]) {
        device::graphLaunch(graph[r], ranks[r]->stream);
        continue;
      }
      KernelPipe k;
      k.coll = coll;
      k.algo = algo;
      k.rank = r;
      k.n = n;
      k.root = n - 1;
      k.channels = k.blocks = channels;
      k.part = part;
      k.type = ncclFloat32;
      k.es = 4;
      k.send = static_cast<const char*>(ranks[r]->in.p);
      k.recv = static_cast<char*>(ranks[r]->out.p);
      k.count = count;
      k.depth = depth;
      k.slotBytes = slot;
      k.conns = conns;
      auto regionOf = [&](int q) { return static_cast<char*>(ranks[q]->region.p); };
      if (algo == KernelPipe::kRing) {
        k.region[KernelPipe::kSelf] = regionOf(r);
        k.region[KernelPipe::kPrev] = regionOf((r + n - 1) % n);
        k.region[KernelPipe::kNext] = regionOf((r + 1) % n);
      } else {
        for (int q = 0; q < n; ++q) k.region[q] = regionOf(q);
      }
      k.state = static_cast<uint64_t*>(ranks[r]->state.p);
      auto* mapped = static_cast<uint32_t*>(device::mappedPointer(words));
      k.stop = mapped;
      k.error = mapped + 1;
      k.timeoutNs = 20000000000ull;
      if (graphs) device::graphBegin(ranks[r]->stream);
      device::launchKernelPipe(k, ranks[r]->stream);
      std::string why;
      if (graphs && !(graph[r] = device::graphEnd(ranks[r]->stream, &why))) return "capture failed: " + why;
      if (graphs) device::graphLaunch(graph[r], ranks[r]->stream);
    }
    for (int r = 0; r < n; ++r) device::streamSynchronize(ranks[r]->stream);
    if (words[1]) err = "a kernel gave up: error word " + std::to_string(words[1]);
    for (int r = 0; r < n && err.empty(); ++r) {
      if ((coll == KC::kReduce || coll == KC::kGather) && r != n - 1) continue;  // only the root has a result
      std::vector<float> got(outCount), want(outCount);
      device::copySync(got.data(), ranks[r]->out.p, outCount * sizeof(float));
      device::memsetSync(ranks[r]->out.p, 0x5a, outCount * sizeof(float));  // poisoned for the next operation
      for (size_t i = 0; i < outCount; ++i) want[i] = virtualWant(coll, n, r, i, count, op);
      err = compareFloats(got, want, "op " + std::to_string(op) + ", rank " + std::to_string(r));
    }
  }
  for (void* g : graph)
    if (g) device::graphDestroy(g);
  ranks.clear();
  device::pinnedFree(words);
  return err;
}

TEST(PipeKernel, VirtualRanksOnOneGpu) {
  REQUIRE_GPU();
  auto results = runRanks(Mode::kThreads, 1, [](int, int, const ncclUniqueId&) -> std::string {
    device::setCurrentDevice(0);
    const int ring = KernelPipe::kRing, mesh = KernelPipe::kMesh;
    std::string err = virtualRanks(2, KC::kAllReduce, ring, 3001, 3);
    if (err.empty()) err = virtualRanks(4, KC::kAllReduce, ring, (1 << 20) + 3, 2);  // many loops per channel
    if (err.empty()) err = virtualRanks(4, KC::kAllReduce, mesh, 300001, 3);
    if (err.empty()) err = virtualRanks(3, KC::kAllGather, ring, 70001, 2);
    if (err.empty()) err = virtualRanks(4, KC::kReduceScatter, mesh, 70001, 2);
    if (err.empty()) err = virtualRanks(4, KC::kBroadcast, ring, 300001, 2);
    if (err.empty()) err = virtualRanks(3, KC::kReduce, ring, 300001, 2);
    if (err.empty()) err = virtualRanks(3, KC::kAllToAll, mesh, 30001, 2);
    if (err.empty()) err = virtualRanks(2, KC::kAllReduce, ring, 5000, 4, true);  // captured once, replayed
    if (err.empty()) err = virtualRanks(4, KC::kAllReduce, mesh, 300001, 3, true);
    const int ll = KernelPipe::kMeshLL;  // the LL kernel: one unit, several rounds, tails
    if (err.empty()) err = virtualRanks(4, KC::kAllReduce, ll, 1, 3);
    if (err.empty()) err = virtualRanks(4, KC::kAllReduce, ll, 20011, 3);
    if (err.empty()) err = virtualRanks(3, KC::kAllGather, ll, 3001, 3);
    if (err.empty()) err = virtualRanks(4, KC::kReduceScatter, ll, 5003, 3);
    if (err.empty()) err = virtualRanks(2, KC::kAllReduce, ll, 9001, 4, true);
    return err;
  }, 120);
  EXPECT_EQ(failures(results), "");
}

}  // namespace
}  // namespace strata::test
