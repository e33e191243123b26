// DeviceDrivenFaults: how device-driven kernels fail (part of gpu_test, on simulated
// GPUs with 4 of them): an abort releases a kernel that waits for a peer; a wait that
// outlasts STRATA_DEVICE_TIMEOUT names the rank; a failure poisons every rank so a
// late one touches nothing; a peer process that exits releases the kernel waiting for
// it; a send and receive of different sizes fail the receiver.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "device/gpu.h"
#include "gpu/gpu_util.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "verify/reference.h"

namespace strata::test {
namespace {

// Enqueues an all-reduce of `count` floats and waits for its stream: the seconds
// that took (-1: not enqueued), and the communicator's asynchronous error after it.
double timedAllReduce(const void* in, void* out, size_t count, ncclComm_t comm, cudaStream_t s, ncclResult_t* async) {
  auto start = std::chrono::steady_clock::now();
  if (ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, s) != ncclSuccess) return -1;
  device::streamSynchronize(s);
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  *async = ncclSuccess;
  ncclCommGetAsyncError(comm, async);
  return sec;
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

// Rank 0's kernel waits for rank 1 until rank 0's communicator is aborted (kernels
// have no timeout of their own by default), then its stream drains at once.
TEST(DeviceDrivenFaults, AnAbortReleasesAKernelWaitingForAPeer) {
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

// With STRATA_DEVICE_TIMEOUT=1, the waiting kernel gives up after a second and the
// communicator reports ncclRemoteError, its log naming the rank it waited for.
TEST(DeviceDrivenFaults, AWaitLongerThanTheTimeoutFailsTheCommunicator) {
  REQUIRE_GPUS(2);
  setenv("STRATA_DEVICE_TIMEOUT", "1", 1);  // the kernels' own bound (none by default, as NCCL)
  reloadEnvironment();
  std::string err = withALoneAllReduce([](ncclComm_t comm, void* stream) -> std::string {
    device::streamSynchronize(stream);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    ncclCommAbort(comm);
    return async == ncclRemoteError ? "" : "async error " + std::to_string(async) + ", expected ncclRemoteError";
  });
  unsetenv("STRATA_DEVICE_TIMEOUT");
  reloadEnvironment();
  EXPECT_EQ(err, "");
}

// A failure stops every rank, and no step goes on after it: rank 0's all-reduce
// gives up (STRATA_DEVICE_TIMEOUT=1) while rank 1 has not called; rank 1's all-reduce,
// made afterwards, finds the communicator failed at once, reads and writes nothing
// (its output keeps its poison: no stale or foreign slot was taken for data), and
// reports the failure, naming rank 0.
TEST(DeviceDrivenFaults, ALateRankFindsTheFailureAndTouchesNothing) {
  REQUIRE_GPUS(2);
  setenv("STRATA_DEVICE_TIMEOUT", "1", 1);
  reloadEnvironment();
  std::atomic<bool> failed{false};
  auto results = runRanks(Mode::kThreads, 2, [&](int rank, int n, const ncclUniqueId& id) -> std::string {
    return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
      const size_t count = 300000;
      DeviceBuffer in(count * sizeof(float)), out(count * sizeof(float));
      uploadFloats(in.p, refInput(n, rank, count));
      device::memsetSync(out.p, 0x5a, count * sizeof(float));
      if (rank == 1)
        while (!failed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ncclResult_t async;
      double sec = timedAllReduce(in.p, out.p, count, comm, s, &async);
      if (sec < 0) return "not enqueued";
      if (rank == 0) failed = true;
      std::string err = async == ncclRemoteError ? "" : "async error " + std::to_string(async) + ", expected ncclRemoteError";
      if (rank == 1 && sec > 0.5) err += " (the late call took " + std::to_string(sec) + " s)";
      if (rank == 1) {
        std::vector<float> got = downloadFloats(out.p, count);
        for (size_t i = 0; i < count && err.empty(); ++i)
          if (memcmp(&got[i], "\x5a\x5a\x5a\x5a", 4) != 0) err = "the late call wrote element " + std::to_string(i);
      }
      ncclCommAbort(comm);
      return err.empty() ? "" : "rank " + std::to_string(rank) + ": " + err;
    });
  }, 120);
  unsetenv("STRATA_DEVICE_TIMEOUT");
  reloadEnvironment();
  EXPECT_EQ(failures(results), "");
}

// Rank 1's process exits (as a crash would: no destroy) while rank 0's all-reduce
// kernel waits for it. No STRATA_DEVICE_TIMEOUT: the host's watch over peers in other
// processes (core/device_watch.h) stops the kernel, rank 0's stream drains within
// seconds and its communicator reports ncclRemoteError. A first all-reduce, which
// both ranks make and check, shows the kernels ran between the two processes.
TEST(DeviceDrivenFaults, APeerProcessThatExitsReleasesTheKernelWaitingForIt) {
  REQUIRE_GPUS(2);
  auto results = runRanks(Mode::kProcesses, 2, [&](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(rank);
    void* stream = device::streamCreate();
    auto s = static_cast<cudaStream_t>(stream);
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return "init failed";
    const size_t count = 70000;
    DeviceBuffer in(count * sizeof(float)), out(count * sizeof(float));
    uploadFloats(in.p, refInput(n, rank, count));
    if (ncclAllReduce(in.p, out.p, count, ncclFloat32, ncclSum, comm, s) != ncclSuccess) return "not enqueued";
    device::streamSynchronize(s);
    std::string err = compareFloats(downloadFloats(out.p, count), refSum(n, count), "the first all-reduce");
    if (!err.empty()) return err;
    if (rank == 1) _exit(0);
    ncclResult_t async;
    double sec = timedAllReduce(in.p, out.p, count, comm, s, &async);
    if (sec < 0) return "not enqueued";
    if (async != ncclRemoteError) err = "async error " + std::to_string(async) + ", expected ncclRemoteError";
    if (sec > 10) err += " (the stream drained " + std::to_string(sec) + " s after the call)";
    ncclCommAbort(comm);
    device::streamDestroy(stream);
    return err;
  }, 120);
  EXPECT_EQ(failures(results), "");
}

// A send of 5000 floats met by a receive of 4000: the receiver's communicator fails
// at once with ncclInvalidUsage (its log names the sender); the sender's kernel,
// whose chunks are never all taken, waits until its communicator is aborted.
TEST(DeviceDrivenFaults, ASendAndReceiveOfDifferentSizesFailTheReceiver) {
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

}  // namespace
}  // namespace strata::test
