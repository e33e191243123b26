// Groups of sends and receives on device buffers larger than one point-to-point
// kernel holds (KernelP2p::kMaxOps transfers), on simulated or real GPUs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/gpu.h"
#include "gpu/gpu_util.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

// Message j between `from` and `to` in round k: the reference data's piece tagged
// (from, to, j) at the round's positions, of a size that differs per message (one of
// them several 128 KiB chunks).
size_t countOf(int j) { return j == 5 ? 100000 : 1000 + 37 * j; }
std::vector<float> messageOf(int from, int to, int j, int round) {
  return refMoved((from * 8 + to) * 64 + j, countOf(j), static_cast<size_t>(round) * countOf(j));
}

// Runs `group` once eagerly, then captured in a graph (only the kernels allow that)
// and replayed twice, filling the inputs of each round before it and checking after.
std::string eagerThenReplayed(cudaStream_t s, ncclComm_t comm, const std::function<void(int)>& fill,
                              const std::function<bool()>& group, const std::function<std::string(int)>& check) {
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
  return err;
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
        for (int j = 0; j < m; ++j) uploadFloats(in[q * m + j]->p, messageOf(rank, peers[q], j, round));
    };
    auto check = [&](int round) -> std::string {
      for (size_t q = 0; q < peers.size(); ++q)
        for (int j = 0; j < m; ++j) {
          std::string e = compareFloats(downloadFloats(out[q * m + j]->p, countOf(j)), messageOf(peers[q], rank, j, round),
                                        "round " + std::to_string(round) + ": message " + std::to_string(j) +
                                            " from rank " + std::to_string(peers[q]));
          if (!e.empty()) return e;
        }
      return "";
    };
    std::string err = eagerThenReplayed(s, comm, fill, group, check);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    return err.empty() && async != ncclSuccess ? "async error " + std::to_string(async) : err;
  });
}

// Before groups were split into kernels by transfer index, rank 0 (48 transfers)
// took the proxy while its peers (24) launched a kernel: every rank waited until
// the timeout (20 s here).
TEST(DeviceDrivenP2pWindows, RanksWithMoreTransfersThanAKernelHoldsMeetTheirPeers) {
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
// in-place all-reduce (DeviceDriven) on one stream, then a send of its result
// (DeviceP2p) on another, with nothing between them from the caller. The send must
// carry the reduced values.
TEST(DeviceDrivenP2pStreams, ASendOnAnotherStreamFollowsTheCollectiveBeforeIt) {
  REQUIRE_GPUS(2);
  EXPECT_EQ(failures(runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) {
    return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t a) -> std::string {
      auto b = static_cast<cudaStream_t>(device::streamCreate());
      const size_t count = 4 << 20;  // long enough for the send to overtake it if nothing orders them
      DeviceBuffer d(count * sizeof(float)), out(count * sizeof(float));
      uploadFloats(d.p, refInput(n, rank, count));
      ncclResult_t r = ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, a);
      if (r == ncclSuccess) r = ncclGroupStart();
      if (r == ncclSuccess) r = ncclSend(d.p, count, ncclFloat32, 1 - rank, comm, b);
      if (r == ncclSuccess) r = ncclRecv(out.p, count, ncclFloat32, 1 - rank, comm, b);
      if (r == ncclSuccess) r = ncclGroupEnd();
      device::streamSynchronize(b);
      device::streamSynchronize(a);
      device::streamDestroy(b);
      if (r != ncclSuccess) return std::string("a call failed: ") + ncclGetLastError(comm);
      return compareFloats(downloadFloats(out.p, count), refSum(n, count), "the sum sent on");
    });
  }, 120)), "");
}

// PyTorch's all_to_all sends to and receives from every rank, itself included: a
// group whose send to itself is a copy on the stream, so it captures with the
// kernel and replays on new inputs. Ranks 3 (DeviceP2p plus the copy) and 1
// (DeviceSelf, no kernel at all).
std::string allToAllRank(int rank, int n, const ncclUniqueId& id) {
  return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
    auto pieceOf = [](int from) { return 3000 + 7 * static_cast<size_t>(from); };  // a size per sender
    const size_t piece = pieceOf(rank);
    std::vector<std::unique_ptr<DeviceBuffer>> in, out;
    for (int p = 0; p < n; ++p) {
      in.push_back(std::make_unique<DeviceBuffer>(piece * sizeof(float)));
      out.push_back(std::make_unique<DeviceBuffer>(pieceOf(p) * sizeof(float)));
    }
    auto group = [&]() -> bool {
      bool ok = ncclGroupStart() == ncclSuccess;
      for (int p = 0; p < n; ++p) {
        ok = ok && ncclSend(in[p]->p, piece, ncclFloat32, p, comm, s) == ncclSuccess;
        ok = ok && ncclRecv(out[p]->p, pieceOf(p), ncclFloat32, p, comm, s) == ncclSuccess;
      }
      return ncclGroupEnd() == ncclSuccess && ok;
    };
    auto fill = [&](int round) {
      for (int p = 0; p < n; ++p) uploadFloats(in[p]->p, refMoved(rank * 8 + p, piece, round * piece));
    };
    auto check = [&](int round) -> std::string {
      for (int p = 0; p < n; ++p) {
        std::string e =
            compareFloats(downloadFloats(out[p]->p, pieceOf(p)), refMoved(p * 8 + rank, pieceOf(p), round * pieceOf(p)),
                          "round " + std::to_string(round) + ": the piece from rank " + std::to_string(p));
        if (!e.empty()) return e;
      }
      return "";
    };
    return eagerThenReplayed(s, comm, fill, group, check);
  });
}

TEST(DeviceDrivenP2pSelf, AnAllToAllWithItselfIsOneStreamOrderedGroup) {
  REQUIRE_GPUS(3);
  for (int n : {3, 1})
    EXPECT_EQ(failures(runRanks(Mode::kThreads, n, allToAllRank, 120)), "") << n << " ranks";
}

// Collectives and sends and receives in one group, the sends on some ranks only: every
// rank all-reduces, and rank 0 also receives a message from each other rank. Each
// rank launches its collective kernel and its point-to-point kernel in the same order
// (the group's call order differs: rank 0 receives first), and the group captures.
std::string mixedRank(int rank, int n, const ncclUniqueId& id) {
  return onOwnGpu(rank, n, id, [&](ncclComm_t comm, cudaStream_t s) -> std::string {
    const size_t count = 70001;
    DeviceBuffer in(count * sizeof(float)), sum(count * sizeof(float));
    std::vector<std::unique_ptr<DeviceBuffer>> from;  // rank 0: from rank p at p - 1
    for (int p = 1; rank == 0 && p < n; ++p) from.push_back(std::make_unique<DeviceBuffer>(count * sizeof(float)));
    auto group = [&]() -> bool {
      bool ok = ncclGroupStart() == ncclSuccess;
      for (int p = 1; rank == 0 && p < n; ++p)
        ok = ok && ncclRecv(from[p - 1]->p, count, ncclFloat32, p, comm, s) == ncclSuccess;
      ok = ok && ncclAllReduce(in.p, sum.p, count, ncclFloat32, ncclSum, comm, s) == ncclSuccess;
      if (rank != 0) ok = ok && ncclSend(in.p, count, ncclFloat32, 0, comm, s) == ncclSuccess;
      return ncclGroupEnd() == ncclSuccess && ok;
    };
    auto fill = [&](int round) { uploadFloats(in.p, refInput(n, rank, count, round * count)); };
    auto check = [&](int round) -> std::string {
      const std::string at = "round " + std::to_string(round) + ": ";
      std::string e = compareFloats(downloadFloats(sum.p, count), refSum(n, count, round * count), at + "the sum");
      for (int p = 1; e.empty() && rank == 0 && p < n; ++p)
        e = compareFloats(downloadFloats(from[p - 1]->p, count), refInput(n, p, count, round * count),
                          at + "the message from rank " + std::to_string(p));
      return e;
    };
    return eagerThenReplayed(s, comm, fill, group, check);
  });
}

TEST(DeviceDrivenP2pMixed, CollectivesWithSendsOfSomeRanksInOneGroupCapture) {
  REQUIRE_GPUS(3);
  for (Mode mode : {Mode::kThreads, Mode::kProcesses})
    EXPECT_EQ(failures(runRanks(mode, 3, mixedRank, 120)), "") << modeName(mode);
}

}  // namespace
}  // namespace strata::test
