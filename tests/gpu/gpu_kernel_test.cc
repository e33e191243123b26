// DeviceOneShot: small collectives on device buffers as one kernel on the caller's
// stream, ranks on GPUs of their own (part of gpu_test; label "gpu", and on
// simulated GPUs with 4 and 8 of them and with one hardware queue). A CUDA graph
// captured once replays exactly with eager calls in between; an abort releases a
// kernel that waits for a peer; a wait that outlasts STRATA_TIMEOUT names the rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "device/gpu.h"
#include "gpu/gpu_util.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

// 20000 floats: 80 KB, three blocks of the kernel.
constexpr size_t kCount = 20000;

// Rank r's input in round k: small integers, so every sum is exact in float.
std::vector<float> inputOf(int rank, int round) {
  std::vector<float> v(kCount);
  for (size_t i = 0; i < kCount; ++i) v[i] = static_cast<float>((rank + 1) * (round + 1) + static_cast<int>(i % 7));
  return v;
}

// The all-reduce (sum) of round k's inputs over n ranks, each input times `scale`.
std::string checkSum(const void* dev, int n, int round, const std::string& what, int scale = 1) {
  std::vector<float> got(kCount);
  device::copySync(got.data(), dev, kCount * sizeof(float));
  for (size_t i = 0; i < kCount; ++i) {
    float want = static_cast<float>(scale * (n * (n + 1) / 2 * (round + 1) + n * static_cast<int>(i % 7)));
    if (got[i] != want)
      return what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " + std::to_string(want);
  }
  return "";
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
    put(in.p, inputOf(rank, 0));
    if (ncclAllReduce(in.p, eager.p, kCount, ncclFloat32, ncclSum, comm, s) != ncclSuccess) return "eager all-reduce failed";
    device::streamSynchronize(s);
    std::string err = checkSum(eager.p, n, 0, "eager round 0");
    if (!err.empty()) return err;
    device::graphBegin(s);
    ncclResult_t r1 = ncclAllReduce(in.p, out.p, kCount, ncclFloat32, ncclSum, comm, s);
    ncclResult_t r2 = ncclAllGather(out.p, gathered.p, 16, ncclFloat32, comm, s);
    if (r2 == ncclSuccess) r2 = ncclAllReduce(in.p, scaled.p, kCount, ncclFloat32, premul, comm, s);
    std::string why;
    void* graph = device::graphEnd(s, &why);
    if (r1 != ncclSuccess || r2 != ncclSuccess) return std::string("capture refused: ") + ncclGetLastError(comm);
    if (!graph) return "capture failed: " + why;
    for (int round = 1; round <= 5 && err.empty(); ++round) {
      put(in.p, inputOf(rank, round));
      put(scalar.p, {static_cast<float>(round + 1)});
      device::graphLaunch(graph, s);
      if (round == 3 && ncclAllReduce(in.p, eager.p, kCount, ncclFloat32, ncclSum, comm, s) != ncclSuccess)
        err = "eager all-reduce between replays failed";
      device::streamSynchronize(s);
      if (err.empty()) err = checkSum(out.p, n, round, "replay " + std::to_string(round));
      if (err.empty()) err = checkSum(scaled.p, n, round, "replay " + std::to_string(round) + " pre-multiplied", round + 1);
      if (err.empty() && round == 3) err = checkSum(eager.p, n, 3, "eager all-reduce between replays");
      std::vector<float> g(n * 16);
      device::copySync(g.data(), gathered.p, g.size() * sizeof(float));
      float want = static_cast<float>(n * (n + 1) / 2 * (round + 1));  // element 0 of the sum, from every rank
      for (int r = 0; r < n && err.empty(); ++r)
        if (g[r * 16] != want) err = "replay " + std::to_string(round) + ": gathered element from rank " + std::to_string(r) + " is wrong";
    }
    device::graphDestroy(graph);
    ncclRedOpDestroy(premul, comm);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    return err.empty() && async != ncclSuccess ? "async error " + std::to_string(async) : err;
  });
}

class DeviceOneShot : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(DeviceOneShot, AGraphCapturedOnceReplaysExactly) {
  auto [mode, n] = GetParam();
  REQUIRE_GPUS(n);
  EXPECT_EQ(failures(runRanks(mode, n, graphRank, 300)), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeviceOneShot,
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
      for (size_t i = 0; i < big; ++i)
        if (got[i] != static_cast<float>(prev * 1000 + round + i % 251))
          return "round " + std::to_string(round) + ": element " + std::to_string(i) + " of the 3 MiB message";
      return got2 == inputOf(prev, round) ? "" : "round " + std::to_string(round) + ": the 80 KB message";
    };
    auto fill = [&](int round) {
      std::vector<float> v(big);
      for (size_t i = 0; i < big; ++i) v[i] = static_cast<float>(rank * 1000 + round + i % 251);
      put(in.p, v);
      put(in2.p, inputOf(rank, round));
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

class DeviceOneShotP2p : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(DeviceOneShotP2p, ARingExchangeCapturedOnceReplaysExactly) {
  auto [mode, n] = GetParam();
  REQUIRE_GPUS(n);
  EXPECT_EQ(failures(runRanks(mode, n, p2pRank, 300)), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeviceOneShotP2p,
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
TEST(DeviceOneShotP2pRoom, ARingExchangeFitsAGpuThatRunsFourBlocksAtOnce) {
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
TEST(DeviceOneShotP2pRoom, ARankWhoseGpuHoldsTooFewBlocksKeepsEveryRankOnTheProxy) {
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

TEST(DeviceOneShotStreams, TheLegacyStreamToo) {
  REQUIRE_GPUS(2);
  auto results = runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(rank);
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return "init failed";
    std::string err;
    for (size_t count : {kCount, size_t{3} << 20}) {
      DeviceBuffer buf(count * sizeof(float));
      std::vector<float> mine(count, static_cast<float>(rank + 1)), got(count);
      device::copyAsync(buf.p, mine.data(), count * sizeof(float), nullptr);
      if (ncclAllReduce(buf.p, buf.p, count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess) err = "not enqueued";
      device::copyAsync(got.data(), buf.p, count * sizeof(float), nullptr);
      device::streamSynchronize(nullptr);
      if (err.empty() && (got[0] != 3.0f || got[count - 1] != 3.0f))
        err = std::to_string(count) + " floats on stream 0: got " + std::to_string(got[0]) + ", expected 3";
    }
    ncclCommDestroy(comm);
    return err;
  });
  EXPECT_EQ(failures(results), "");
}

// NCCL ignores a non-root's output of a reduce or gather, which may be null: those
// ranks still take the kernel with the root (deciding by an unused pointer sent them
// to the proxy while the root waited in its kernel).
TEST(DeviceOneShotStreams, ANonRootsOutputMayBeNull) {
  REQUIRE_GPUS(3);
  auto results = runRanks(Mode::kThreads, 3, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
      const int root = 1;
      DeviceBuffer in(kCount * sizeof(float)), out(n * kCount * sizeof(float));
      put(in.p, inputOf(rank, 0));
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
        if (std::vector<float>(got.begin() + q * kCount, got.begin() + (q + 1) * kCount) != inputOf(q, 0))
          return "gather: rank " + std::to_string(q) + "'s piece differs";
      return "";
    });
  }, 120);
  EXPECT_EQ(failures(results), "");
}

// A communicator's calls alternate between two streams the caller never orders: its
// kernels share the step count, flags and slots, so each waits for the one before.
TEST(DeviceOneShotStreams, CallsOnTwoStreamsRunInCallOrder) {
  REQUIRE_GPUS(2);
  auto results = runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t a) -> std::string {
      void* b = device::streamCreate();
      const int calls = 8;
      std::vector<std::unique_ptr<DeviceBuffer>> in, out;
      for (int i = 0; i < calls; ++i) {
        in.push_back(std::make_unique<DeviceBuffer>(kCount * sizeof(float)));
        out.push_back(std::make_unique<DeviceBuffer>(kCount * sizeof(float)));
        put(in[i]->p, inputOf(rank, i));
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

// Two ranks as threads: rank 0 enqueues a 256-float all-reduce that rank 1 never
// joins, then `then` (which ends rank 0's communicator) says what went wrong; rank 1
// waits for that and aborts its own.
std::string withALoneAllReduce(const std::function<std::string(ncclComm_t, void*)>& then) {
  std::atomic<bool> rank0Done{false};
  auto results = runRanks(Mode::kThreads, 2, [&](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(rank);
    void* stream = device::streamCreate();
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return "init failed";
    std::string err;
    if (rank == 0) {
      DeviceBuffer buf(1024);
      if (ncclAllReduce(buf.p, buf.p, 256, ncclFloat32, ncclSum, comm, static_cast<cudaStream_t>(stream)) != ncclSuccess)
        err = "the all-reduce was not enqueued";
      std::string after = then(comm, stream);
      if (err.empty()) err = after;
      rank0Done = true;
    } else {
      while (!rank0Done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ncclCommAbort(comm);
    }
    device::streamDestroy(stream);
    return err;
  }, 120);
  return failures(results);
}

// Rank 0's kernel waits for rank 1 until rank 0's communicator is aborted
// (STRATA_TIMEOUT is 60 s), then its stream drains at once.
TEST(DeviceOneShotFaults, AnAbortReleasesAKernelWaitingForAPeer) {
  REQUIRE_GPUS(2);
  EXPECT_EQ(withALoneAllReduce([](ncclComm_t comm, void* stream) -> std::string {
              std::this_thread::sleep_for(std::chrono::milliseconds(300));
              std::string err = device::streamIdle(stream) ? "the kernel finished without its peer" : "";
              auto start = std::chrono::steady_clock::now();
              ncclCommAbort(comm);
              device::streamSynchronize(stream);
              double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
              if (sec > 10) err = "the stream drained " + std::to_string(sec) + " s after the abort";
              return err;
            }),
            "");
}

// With STRATA_TIMEOUT=1, the waiting kernel gives up after a second and the
// communicator reports ncclRemoteError, its log naming the rank it waited for.
TEST(DeviceOneShotFaults, AWaitLongerThanTheTimeoutFailsTheCommunicator) {
  REQUIRE_GPUS(2);
  setenv("STRATA_TIMEOUT", "1", 1);
  reloadEnvironment();
  std::string err = withALoneAllReduce([](ncclComm_t comm, void* stream) -> std::string {
    device::streamSynchronize(stream);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    ncclCommAbort(comm);
    return async == ncclRemoteError ? "" : "async error " + std::to_string(async) + ", expected ncclRemoteError";
  });
  unsetenv("STRATA_TIMEOUT");
  reloadEnvironment();
  EXPECT_EQ(err, "");
}

// A send of 5000 floats met by a receive of 4000: the receiver's communicator fails
// at once with ncclInvalidUsage (its log names the sender); the sender's kernel,
// whose chunks are never all taken, waits until its communicator is aborted.
TEST(DeviceOneShotFaults, ASendAndReceiveOfDifferentSizesFailTheReceiver) {
  REQUIRE_GPUS(2);
  std::atomic<bool> failed{false}, senderGone{false};
  auto results = runRanks(Mode::kThreads, 2, [&](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(rank);
    void* stream = device::streamCreate();
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return "init failed";
    DeviceBuffer buf(5000 * sizeof(float));
    auto s = static_cast<cudaStream_t>(stream);
    ncclResult_t r = rank == 0 ? ncclSend(buf.p, 5000, ncclFloat32, 1, comm, s) : ncclRecv(buf.p, 4000, ncclFloat32, 0, comm, s);
    std::string err = r == ncclSuccess ? "" : "not enqueued";
    if (rank == 1) {
      ncclResult_t async = ncclSuccess;
      for (int i = 0; i < 1000 && async == ncclSuccess; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ncclCommGetAsyncError(comm, &async);
      }
      if (err.empty() && async != ncclInvalidUsage) err = "async error " + std::to_string(async) + ", expected ncclInvalidUsage";
      failed = true;
      while (!senderGone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ncclCommAbort(comm);
    } else {  // aborted first: its kernel still stores into the receiver's region until it stops
      while (!failed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ncclCommAbort(comm);
      device::streamSynchronize(stream);
      senderGone = true;
    }
    device::streamSynchronize(stream);
    device::streamDestroy(stream);
    return err;
  }, 120);
  EXPECT_EQ(failures(results), "");
}

// The kernel alone, without a communicator: n virtual ranks on one GPU, each
// kernel on a stream of its own with its own region, counter and buffers. On a real
// GPU this checks the PTX primitives and the protocol on one device (kernels of
// 1-19 blocks, co-resident on any GPU of this class), which the machine lent for
// checks has; the communicator's path needs a GPU per rank.
struct VirtualRank {
  DeviceBuffer region, counter, in, out;
  void* stream;
  VirtualRank(size_t regionBytes, size_t bytes)
      : region(regionBytes), counter(16), in(bytes), out(bytes), stream(device::streamCreate()) {
    device::memsetSync(region.p, 0, regionBytes);
    device::memsetSync(counter.p, 0, 16);
  }
  ~VirtualRank() { device::streamDestroy(stream); }
};

// What rank r's output holds at element i after operation `op` (rank q's input is
// (q + 1) * (op + 1) everywhere; the root is the last rank).
float virtualWant(int coll, int n, size_t i, size_t count, int op) {
  using K = device::KernelColl;
  if (coll == K::kAllGather) return static_cast<float>((i / count + 1) * (op + 1));
  if (coll == K::kBroadcast) return static_cast<float>(n * (op + 1));
  return static_cast<float>(n * (n + 1) / 2 * (op + 1));
}

// `split`: two-shot rounds. `graphs`: each rank's kernel is captured once, in a CUDA
// graph, and every later operation replays it (the step counter in device memory
// moves the slots along).
std::string virtualRanks(int n, int coll, bool split, size_t count, int ops, bool graphs = false) {
  const size_t slot = 512 << 10, bytes = count * sizeof(float) * (coll == device::KernelColl::kAllGather ? n : 1);
  auto* words = static_cast<uint32_t*>(device::pinnedAlloc(8));
  words[0] = words[1] = 0;
  std::vector<std::unique_ptr<VirtualRank>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<VirtualRank>(device::KernelColl::regionBytes(n, slot), bytes));
  std::string err;
  std::vector<void*> graph(n, nullptr);
  for (int op = 0; op < ops && err.empty(); ++op) {
    for (int r = 0; r < n; ++r) {
      put(ranks[r]->in.p, std::vector<float>(count, static_cast<float>((r + 1) * (op + 1))));
      if (graph[r]) {
        device::graphLaunch(graph[r], ranks[r]->stream);
        continue;
      }
      device::KernelColl k;
      k.coll = coll;
      k.split = split;
      k.rank = r;
      k.n = n;
      k.root = n - 1;
      k.type = ncclFloat32;
      k.es = 4;
      k.send = static_cast<const char*>(ranks[r]->in.p);
      k.recv = static_cast<char*>(ranks[r]->out.p);
      k.count = count;
      k.slotBytes = slot;
      k.shapeRounds(16 << 10);
      for (int q = 0; q < n; ++q) k.region[q] = static_cast<char*>(ranks[q]->region.p);
      k.counter = static_cast<uint64_t*>(ranks[r]->counter.p);
      auto* mapped = static_cast<uint32_t*>(device::mappedPointer(words));
      k.stop = mapped;
      k.error = mapped + 1;
      k.timeoutNs = 20000000000ull;
      if (graphs) device::graphBegin(ranks[r]->stream);
      device::launchKernelColl(k, ranks[r]->stream);
      std::string why;
      if (graphs && !(graph[r] = device::graphEnd(ranks[r]->stream, &why))) return "capture failed: " + why;
      if (graphs) device::graphLaunch(graph[r], ranks[r]->stream);
    }
    for (int r = 0; r < n; ++r) device::streamSynchronize(ranks[r]->stream);
    if (words[1]) err = "a kernel gave up: error word " + std::to_string(words[1]);
    for (int r = 0; r < n && err.empty(); ++r) {
      if (coll == device::KernelColl::kReduce && r != n - 1) continue;  // only the root has a result
      std::vector<float> got(bytes / sizeof(float));
      device::copySync(got.data(), ranks[r]->out.p, bytes);
      for (size_t i = 0; i < got.size() && err.empty(); ++i) {
        float want = virtualWant(coll, n, i, count, op);
        if (got[i] != want)
          err = "op " + std::to_string(op) + ", rank " + std::to_string(r) + ", element " + std::to_string(i) + ": " +
                std::to_string(got[i]) + ", expected " + std::to_string(want);
      }
    }
  }
  for (void* g : graph)
    if (g) device::graphDestroy(g);
  ranks.clear();
  device::pinnedFree(words);
  return err;
}

TEST(KernelCollProtocol, VirtualRanksOnOneGpu) {
  REQUIRE_GPU();
  auto results = runRanks(Mode::kThreads, 1, [](int, int, const ncclUniqueId&) -> std::string {
    device::setCurrentDevice(0);
    using K = device::KernelColl;
    std::string err = virtualRanks(2, K::kAllReduce, false, 3001, 3);                // one round, one block
    if (err.empty()) err = virtualRanks(2, K::kAllReduce, false, (1 << 20) + 3, 2);  // 9 rounds of 32 blocks
    if (err.empty()) err = virtualRanks(4, K::kAllReduce, true, 300001, 3);          // two-shot, 19 blocks
    if (err.empty()) err = virtualRanks(3, K::kAllGather, false, 70001, 2);
    if (err.empty()) err = virtualRanks(4, K::kBroadcast, true, 300001, 2);          // root 3 scatters, all spread
    if (err.empty()) err = virtualRanks(3, K::kReduce, true, 300001, 2);             // slices reduced into root 2
    if (err.empty()) err = virtualRanks(2, K::kAllReduce, false, 5000, 4, true);    // captured once, replayed
    if (err.empty()) err = virtualRanks(4, K::kAllReduce, true, 300001, 3, true);
    return err;
  }, 120);
  EXPECT_EQ(failures(results), "");
}

}  // namespace
}  // namespace strata::test
