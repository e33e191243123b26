// Stream order of the calls on device buffers, and host-buffer operations behind
// a stream that never reaches them (label "gpu"; on simulated GPUs too).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "device/gpu.h"
#include "gpu/gpu_util.h"
#include "harness/ranks.h"
#include "nccl.h"

#ifdef STRATA_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace strata::test {
namespace {

// NCCL_PROTO=LL (a job tuned for NCCL) leaves out the device-driven kernels for a
// broadcast (their LL serves all-reduce, all-gather and reduce-scatter): it still runs,
// through host staging, exact, and every rank says so once (a warning naming the
// variable and the kernels left out), however many calls it makes.
TEST(DeviceDrivenProtocols, AProtocolTheKernelsLackIsSaidOnce) {
  REQUIRE_GPUS(2);
  std::string dir = testing::TempDir() + "strata-proto-warn." + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  setenv("NCCL_PROTO", "LL", 1);
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", (dir + "/warn.%p.log").c_str(), 1);
  reloadEnvironment();
  auto results = runRanks(Mode::kProcesses, 2, [](int rank, int n, const ncclUniqueId& id) {
    return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
      const size_t count = 5003;
      DeviceBuffer buf(count * sizeof(float));
      for (int round = 0; round < 3; ++round) {
        int root = round % n;
        std::vector<float> mine = refMoved(rank, count, round * count);
        uploadFloats(buf.p, mine);
        if (ncclBroadcast(buf.p, buf.p, count, ncclFloat32, root, comm, s) != ncclSuccess)
          return std::string("broadcast: ") + ncclGetLastError(comm);
        device::streamSynchronize(s);
        std::string e = compareFloats(downloadFloats(buf.p, count), refMoved(root, count, round * count),
                                      "round " + std::to_string(round));
        if (!e.empty()) return e;
      }
      return std::string();
    });
  });
  for (const char* name : {"NCCL_PROTO", "NCCL_DEBUG", "NCCL_DEBUG_FILE"}) unsetenv(name);
  reloadEnvironment();
  EXPECT_EQ(failures(results), "");
  std::vector<std::vector<std::string>> logs = rankLogs(dir);
  EXPECT_EQ(logs.size(), 2u);
  for (const auto& lines : logs) {
    int said = 0;
    for (const std::string& l : lines)
      if (l.find("NCCL_PROTO=LL leave out the device-driven kernels") != std::string::npos &&
          l.find("Broadcast") != std::string::npos)
        ++said;
    EXPECT_EQ(said, 1) << "a rank's warnings:\n" << testing::PrintToString(lines);
  }
  std::filesystem::remove_all(dir);
}

// NCCL_PROTO=LL128 leaves no path at all for device buffers (no kernel has LL128, nor
// has any host algorithm): the call fails at once with ncclInvalidUsage naming it,
// rather than returning and leaving the output unwritten.
TEST(DeviceDrivenProtocols, AProtocolNothingHasFailsTheCall) {
  REQUIRE_GPUS(2);
  setenv("NCCL_PROTO", "LL128", 1);
  reloadEnvironment();
  auto results = runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) {
    return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
      DeviceBuffer buf(1024 * sizeof(float));
      ncclResult_t r = ncclAllReduce(buf.p, buf.p, 1024, ncclFloat32, ncclSum, comm, s);
      std::string why = ncclGetLastError(comm);
      if (r != ncclInvalidUsage) return "the all-reduce returned " + std::to_string(r) + ": " + why;
      if (why.find("NCCL_PROTO=LL128") == std::string::npos) return "unclear error: " + why;
      return std::string();
    });
  });
  unsetenv("NCCL_PROTO");
  reloadEnvironment();
  EXPECT_EQ(failures(results), "");
}

// Stream order: the call returns before the stream has run it, and work enqueued
// after it sees the result; on CUDA, a captured stream is refused with a clear error.
TEST(GpuStreams, EnqueuedInOrderAndCaptureRefused) {
  REQUIRE_GPU();
  auto results = runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(0);
    void* s = device::streamCreate();
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    const size_t count = 1 << 20;
    DeviceBuffer d(count * sizeof(float));
    std::vector<float> mine = refInput(n, rank, count), got(count);
    device::copyAsync(d.p, mine.data(), count * sizeof(float), s);
    for (int i = 0; i < 3; ++i) RANK_NCCL(ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, static_cast<cudaStream_t>(s)));
    device::copyAsync(got.data(), d.p, count * sizeof(float), s);  // ordered after the all-reduces
    device::streamSynchronize(s);
    std::vector<float> want = refSum(n, count);  // the sum, then doubled twice
    for (float& x : want) x *= 4;
    if (auto e = compareFloats(got, want, "stream order"); !e.empty()) return e;
#ifdef STRATA_TEST_CUDA
    if (!simulated()) {
      cudaStream_t cs = static_cast<cudaStream_t>(s);
      if (cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return "cannot capture";
      ncclResult_t r = ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, cs);
      cudaGraph_t g;
      cudaStreamEndCapture(cs, &g);
      if (r != ncclInvalidUsage) return "capture was not refused (" + std::to_string(r) + ")";
      if (std::string(ncclGetLastError(comm)).find("CUDA graph") == std::string::npos)
        return std::string("unclear error: ") + ncclGetLastError(comm);
    }
#endif
    ncclCommDestroy(comm);
    device::streamDestroy(s);
    return "";
  });
  EXPECT_EQ(failures(results), "");
}

// Host-buffer operations wait for the communicator's earlier stream-ordered work;
// behind a stream that never gets there they fail, naming the cause, once
// STRATA_TIMEOUT passes, or as soon as another thread aborts the communicator:
// never hang (cudaEventSynchronize could not be ended either way).
TEST(GpuStreams, AHostOperationBehindABlockedStreamFailsInsteadOfHanging) {
  REQUIRE_GPU();
  setenv("STRATA_TIMEOUT", "2", 1);
  reloadEnvironment();
  device::setCurrentDevice(0);
  void* s = device::streamCreate();
  auto* flag = static_cast<uint64_t*>(device::pinnedAlloc(sizeof(uint64_t)));
  __atomic_store_n(flag, 0, __ATOMIC_RELEASE);
  ncclComm_t comm = nullptr;
  int dev = 0;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, &dev), ncclSuccess) << ncclGetLastError(nullptr);
  const size_t count = 1024;
  DeviceBuffer d(count * sizeof(float));
  std::vector<float> host(count, 1.0f);
  auto cs = static_cast<cudaStream_t>(s);
  device::waitHostFlag(s, flag, 1);  // the stream holds here until the flag is raised
  ASSERT_EQ(ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, cs), ncclSuccess) << ncclGetLastError(comm);
  auto seconds = [](auto since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  };
  auto t0 = std::chrono::steady_clock::now();
  ncclResult_t r = ncclAllReduce(host.data(), host.data(), count, ncclFloat32, ncclSum, comm, cs);
  double waited = seconds(t0);
  std::string why = ncclGetLastError(comm);
  EXPECT_EQ(r, ncclSystemError) << why;
  EXPECT_NE(why.find("STRATA_TIMEOUT"), std::string::npos) << why;
  EXPECT_GE(waited, 1.5);
  EXPECT_LT(waited, 30.0);

  setenv("STRATA_TIMEOUT", "300", 1);
  reloadEnvironment();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ncclCommAbort(comm);
  });
  t0 = std::chrono::steady_clock::now();
  r = ncclAllReduce(host.data(), host.data(), count, ncclFloat32, ncclSum, comm, cs);
  waited = seconds(t0);
  aborter.join();
  EXPECT_NE(r, ncclSuccess);
  EXPECT_GE(waited, 0.2) << "the second host operation did not wait for the stream";
  EXPECT_LT(waited, 30.0) << "the abort did not end the wait";
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
  device::streamSynchronize(s);
  device::streamDestroy(s);
  device::pinnedFree(flag);
  unsetenv("STRATA_TIMEOUT");
  reloadEnvironment();
}

}  // namespace
}  // namespace strata::test
