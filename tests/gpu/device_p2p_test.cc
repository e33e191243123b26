// Groups of sends and receives on device buffers larger than one point-to-point
// kernel holds (KernelP2p::kMaxOps transfers), on simulated or real GPUs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "device/gpu.h"
#include "gpu/gpu_util.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

// Message j between `from` and `to` in round k: small integers, exact in float, of a
// size that differs per message (one of them several 128 KiB chunks).
size_t countOf(int j) { return j == 5 ? 100000 : 1000 + 37 * j; }
float valueOf(int from, int to, int j, int round, size_t i) {
  return static_cast<float>(from * 100000 + to * 10000 + j * 100 + round * 7 + static_cast<int>(i % 5));
}

// Rank 0 exchanges `m` messages each way with every other rank; the others only
// with rank 0. With n = 3 and m = 12, rank 0 has 48 transfers (more than a kernel
// holds: two kernels in turn) and the others 24 (one kernel): ranks with different
// counts must still meet. Eager once, then captured in a graph (only the kernels
// allow that) and replayed on new inputs.
std::string fanRank(int rank, int n, const ncclUniqueId& id, int m) {
  return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
    std::vector<int> peers;
    for (int p = 0; p < n; ++p)
      if (p != rank && (rank == 0 || p == 0)) peers.push_back(p);
    std::vector<std::unique_ptr<DeviceBuffer>> in, out;  // [peer index * m + j]
    for (size_t q = 0; q < peers.size(); ++q)
      for (int j = 0; j < m; ++j) {
        in.push_back(std::make_unique<DeviceBuffer>(countOf(j) * sizeof(float)));
        out.push_back(std::make_unique<DeviceBuffer>(countOf(j) * sizeof(float)));
      }
    auto group = [&]() -> bool {
      bool ok = ncclGroupStart() == ncclSuccess;
      for (int j = 0; j < m; ++j)
        for (size_t q = 0; q < peers.size(); ++q) {
          ok = ok && ncclSend(in[q * m + j]->p, countOf(j), ncclFloat32, peers[q], comm, s) == ncclSuccess;
          ok = ok && ncclRecv(out[q * m + j]->p, countOf(j), ncclFloat32, peers[q], comm, s) == ncclSuccess;
        }
      return ncclGroupEnd() == ncclSuccess && ok;
    };
    auto fill = [&](int round) {
      for (size_t q = 0; q < peers.size(); ++q)
        for (int j = 0; j < m; ++j) {
          std::vector<float> v(countOf(j));
          for (size_t i = 0; i < v.size(); ++i) v[i] = valueOf(rank, peers[q], j, round, i);
          device::copySync(in[q * m + j]->p, v.data(), v.size() * sizeof(float));
        }
    };
    auto check = [&](int round) -> std::string {
      for (size_t q = 0; q < peers.size(); ++q)
        for (int j = 0; j < m; ++j) {
          std::vector<float> got(countOf(j));
          device::copySync(got.data(), out[q * m + j]->p, got.size() * sizeof(float));
          for (size_t i = 0; i < got.size(); ++i)
            if (got[i] != valueOf(peers[q], rank, j, round, i))
              return "round " + std::to_string(round) + ": message " + std::to_string(j) + " from rank " +
                     std::to_string(peers[q]) + ", element " + std::to_string(i) + " is " + std::to_string(got[i]);
        }
      return "";
    };
    fill(0);
    if (!group()) return std::string("eager group refused: ") + ncclGetLastError(comm);
    device::streamSynchronize(s);
    std::string err = check(0);
    if (!err.empty()) return err;
    std::string refused;
    void* graph = captureGroup(s, comm, group, &refused);
    if (!graph) return refused;
    for (int round = 1; round <= 2 && err.empty(); ++round) {
      fill(round);
      device::graphLaunch(graph, s);
      device::streamSynchronize(s);
      err = check(round);
    }
    device::graphDestroy(graph);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    return err.empty() && async != ncclSuccess ? "async error " + std::to_string(async) : err;
  });
}

// Before groups were split into kernels by transfer index, rank 0 (48 transfers)
// took the proxy while its peers (24) launched a kernel: every rank waited until
// the timeout (20 s here).
TEST(DeviceOneShotP2pWindows, RanksWithMoreTransfersThanAKernelHoldsMeetTheirPeers) {
  REQUIRE_GPUS(3);
  setenv("STRATA_TIMEOUT", "20", 1);
  reloadEnvironment();
  for (Mode mode : {Mode::kThreads, Mode::kProcesses})
    EXPECT_EQ(failures(runRanks(mode, 3, [](int r, int n, const ncclUniqueId& id) { return fanRank(r, n, id, 12); },
                                120)),
              "")
        << modeName(mode);
  unsetenv("STRATA_TIMEOUT");
  reloadEnvironment();
}

// A communicator's work on two streams stays in call order, as NCCL keeps it: an
// in-place all-reduce (DeviceOneShot) on one stream, then a send of its result
// (DeviceP2p) on another, with nothing between them from the caller. The send must
// carry the reduced values.
TEST(DeviceOneShotP2pStreams, ASendOnAnotherStreamFollowsTheCollectiveBeforeIt) {
  REQUIRE_GPUS(2);
  EXPECT_EQ(failures(runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) {
    return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t a) -> std::string {
      auto b = static_cast<cudaStream_t>(device::streamCreate());
      const size_t count = 4 << 20;  // long enough for the send to overtake it if nothing orders them
      DeviceBuffer d(count * sizeof(float)), out(count * sizeof(float));
      std::vector<float> v(count, static_cast<float>(rank + 1)), got(count);
      device::copySync(d.p, v.data(), count * sizeof(float));
      ncclResult_t r = ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, a);
      if (r == ncclSuccess) r = ncclGroupStart();
      if (r == ncclSuccess) r = ncclSend(d.p, count, ncclFloat32, 1 - rank, comm, b);
      if (r == ncclSuccess) r = ncclRecv(out.p, count, ncclFloat32, 1 - rank, comm, b);
      if (r == ncclSuccess) r = ncclGroupEnd();
      device::streamSynchronize(b);
      device::streamSynchronize(a);
      device::streamDestroy(b);
      if (r != ncclSuccess) return std::string("a call failed: ") + ncclGetLastError(comm);
      device::copySync(got.data(), out.p, count * sizeof(float));
      for (size_t i = 0; i < count; ++i)
        if (got[i] != 3.0f) return "element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected 3";
      return std::string();
    });
  }, 120)), "");
}

}  // namespace
}  // namespace strata::test
