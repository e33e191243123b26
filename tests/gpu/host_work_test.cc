// What a call on device buffers costs the calling thread: its calls into the GPU
// runtime per collective, counted on simulated GPUs, where every call through
// device/gpu.h is counted for the thread that makes it. An all-reduce on two GPUs
// makes 7: a pointer query per buffer, the stream's device, its capture state, the
// launch, the current device (the launch's), and the event that orders the
// communicator's next call on another stream; one rank in place makes 4 (no launch).
// Each capture query once cost three calls (the capture mode exchanged around it).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "device/gpu.h"
#include "gpu/gpu_util.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

constexpr int kCalls = 20;

// The runtime calls of one all-reduce after warm-up, averaged over kCalls.
std::string callsPerAllReduce(int rank, int n, const ncclUniqueId& id, bool inPlace, double* calls) {
  return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
    const size_t count = 4096;
    DeviceBuffer in(count * sizeof(float)), out(count * sizeof(float));
    uploadFloats(in.p, refInput(n, rank, count));
    void* dst = inPlace ? in.p : out.p;
    for (int i = 0; i < 3; ++i)
      if (ncclAllReduce(in.p, dst, count, ncclFloat32, ncclSum, comm, s) != ncclSuccess)
        return std::string("warm-up: ") + ncclGetLastError(comm);
    device::streamSynchronize(s);
    uint64_t before = device::runtimeCalls();
    for (int i = 0; i < kCalls; ++i)
      if (ncclAllReduce(in.p, dst, count, ncclFloat32, ncclSum, comm, s) != ncclSuccess)
        return std::string("all-reduce: ") + ncclGetLastError(comm);
    *calls = static_cast<double>(device::runtimeCalls() - before) / kCalls;
    device::streamSynchronize(s);
    return "";
  });
}

// One rank in place (DeviceSelf: nothing to move) and two ranks, each on its own GPU
// (a DeviceRing or DeviceMesh kernel), as threads.
TEST(DeviceDrivenHostWork, RuntimeCallsPerCollective) {
  REQUIRE_GPUS(2);
  if (!simulated()) GTEST_SKIP() << "counted on simulated GPUs only";
  struct Case {
    int n;
    bool inPlace;
    double most;
  };
  for (Case c : {Case{1, true, 4}, Case{2, false, 7}}) {
    std::vector<double> calls(c.n, 0);
    EXPECT_EQ(failures(runRanks(Mode::kThreads, c.n, [&](int r, int n, const ncclUniqueId& id) {
                return callsPerAllReduce(r, n, id, c.inPlace, &calls[r]);
              })),
              "");
    for (int r = 0; r < c.n; ++r) {
      printf("%d rank(s)%s: rank %d made %.1f runtime calls per all-reduce\n", c.n, c.inPlace ? ", in place" : "", r,
             calls[r]);
      EXPECT_LE(calls[r], c.most) << c.n << " ranks, rank " << r;
      EXPECT_GT(calls[r], 0) << "nothing counted";
    }
  }
}

}  // namespace
}  // namespace strata::test
