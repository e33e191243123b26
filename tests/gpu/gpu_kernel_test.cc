// DeviceOneShot: small collectives on device buffers as one kernel on the caller's
// stream, ranks on GPUs of their own (part of gpu_test; label "gpu", and on
// simulated GPUs with 4 and 8 of them and with one hardware queue). A CUDA graph
// captured once replays exactly with eager calls in between; an abort releases a
// kernel that waits for a peer; a wait that outlasts STRATA_TIMEOUT names the rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
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

// The all-reduce (sum) of round k's inputs over n ranks.
std::string checkSum(const void* dev, int n, int round, const std::string& what) {
  std::vector<float> got(kCount);
  device::copySync(got.data(), dev, kCount * sizeof(float));
  for (size_t i = 0; i < kCount; ++i) {
    float want = static_cast<float>(n * (n + 1) / 2 * (round + 1) + n * static_cast<int>(i % 7));
    if (got[i] != want)
      return what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " + std::to_string(want);
  }
  return "";
}

void put(void* dev, const std::vector<float>& v) { device::copySync(dev, v.data(), v.size() * sizeof(float)); }

// A rank on GPU rank % GPUs, with a stream and a communicator, running `body`.
template <typename F>
std::string onOwnGpu(int rank, int n, const ncclUniqueId& id, F body) {
  device::setCurrentDevice(rank % device::gpuCount());
  void* stream = device::streamCreate();
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return "init failed: " + std::string(ncclGetLastError(nullptr));
  std::string err = body(comm, static_cast<cudaStream_t>(stream));
  if (err.empty()) ncclCommDestroy(comm);
  else ncclCommAbort(comm);
  device::streamDestroy(stream);
  return err.empty() ? "" : "rank " + std::to_string(rank) + ": " + err;
}

#define REQUIRE_GPUS(n)                                                                                 \
  REQUIRE_GPU();                                                                                        \
  if (gpusVisible() < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs; " << gpusVisible() << " visible"

// Captured once (all-reduce, then all-gather of the result's first elements), replayed
// five times on new inputs with an eager all-reduce between replays: every replay
// advances the operation count in device memory, so the ranks stay in step.
std::string graphRank(int rank, int n, const ncclUniqueId& id) {
  return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
    DeviceBuffer in(kCount * sizeof(float)), out(kCount * sizeof(float)), eager(kCount * sizeof(float));
    DeviceBuffer gathered(n * 16 * sizeof(float));
    put(in.p, inputOf(rank, 0));
    if (ncclAllReduce(in.p, eager.p, kCount, ncclFloat32, ncclSum, comm, s) != ncclSuccess) return "eager all-reduce failed";
    device::streamSynchronize(s);
    std::string err = checkSum(eager.p, n, 0, "eager round 0");
    if (!err.empty()) return err;
    device::graphBegin(s);
    ncclResult_t r1 = ncclAllReduce(in.p, out.p, kCount, ncclFloat32, ncclSum, comm, s);
    ncclResult_t r2 = ncclAllGather(out.p, gathered.p, 16, ncclFloat32, comm, s);
    std::string why;
    void* graph = device::graphEnd(s, &why);
    if (r1 != ncclSuccess || r2 != ncclSuccess) return std::string("capture refused: ") + ncclGetLastError(comm);
    if (!graph) return "capture failed: " + why;
    for (int round = 1; round <= 5 && err.empty(); ++round) {
      put(in.p, inputOf(rank, round));
      device::graphLaunch(graph, s);
      if (round == 3 && ncclAllReduce(in.p, eager.p, kCount, ncclFloat32, ncclSum, comm, s) != ncclSuccess)
        err = "eager all-reduce between replays failed";
      device::streamSynchronize(s);
      if (err.empty()) err = checkSum(out.p, n, round, "replay " + std::to_string(round));
      if (err.empty() && round == 3) err = checkSum(eager.p, n, 3, "eager all-reduce between replays");
      std::vector<float> g(n * 16);
      device::copySync(g.data(), gathered.p, g.size() * sizeof(float));
      float want = static_cast<float>(n * (n + 1) / 2 * (round + 1));  // element 0 of the sum, from every rank
      for (int r = 0; r < n && err.empty(); ++r)
        if (g[r * 16] != want) err = "replay " + std::to_string(round) + ": gathered element from rank " + std::to_string(r) + " is wrong";
    }
    device::graphDestroy(graph);
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

// On the legacy stream (0) too, ordered with the copies there, in one round and in several.
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

// Rank 1 never joins the all-reduce. Rank 0's kernel waits for it until rank 0's
// communicator is aborted (STRATA_TIMEOUT is 60 s), then its stream drains at once.
TEST(DeviceOneShotFaults, AnAbortReleasesAKernelWaitingForAPeer) {
  REQUIRE_GPUS(2);
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
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (device::streamIdle(stream)) err = "the kernel finished without its peer";
      auto start = std::chrono::steady_clock::now();
      ncclCommAbort(comm);
      device::streamSynchronize(stream);
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (sec > 10) err = "the stream drained " + std::to_string(sec) + " s after the abort";
      rank0Done = true;
    } else {
      while (!rank0Done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ncclCommAbort(comm);
    }
    device::streamDestroy(stream);
    return err;
  }, 120);
  EXPECT_EQ(failures(results), "");
}

// With STRATA_TIMEOUT=1, the waiting kernel gives up after a second and the
// communicator reports ncclRemoteError, its log naming the rank it waited for.
TEST(DeviceOneShotFaults, AWaitLongerThanTheTimeoutFailsTheCommunicator) {
  REQUIRE_GPUS(2);
  setenv("STRATA_TIMEOUT", "1", 1);
  reloadEnvironment();
  std::atomic<bool> rank0Done{false};
  auto results = runRanks(Mode::kThreads, 2, [&](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(rank);
    void* stream = device::streamCreate();
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return "init failed";
    std::string err;
    if (rank == 0) {
      DeviceBuffer buf(1024);
      ncclAllReduce(buf.p, buf.p, 256, ncclFloat32, ncclSum, comm, static_cast<cudaStream_t>(stream));
      device::streamSynchronize(stream);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm, &async);
      if (async != ncclRemoteError) err = "async error " + std::to_string(async) + ", expected ncclRemoteError";
      rank0Done = true;
    } else {
      while (!rank0Done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ncclCommAbort(comm);
    device::streamDestroy(stream);
    return err;
  }, 120);
  unsetenv("STRATA_TIMEOUT");
  reloadEnvironment();
  EXPECT_EQ(failures(results), "");
}

}  // namespace
}  // namespace strata::test
