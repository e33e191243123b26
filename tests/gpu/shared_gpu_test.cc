// Ranks that are threads of one process on one GPU (DeviceShared): rank 0's stream
// runs each whole operation after the others' streams reach their calls, and theirs
// wait for it. The exact-results matrix (every collective, type and op, in place or
// not) is OneGpu/GpuCollectives in gpu_test.cc; here what is particular to it:
// one thread driving every rank, streams that change between calls, host-buffer
// operations that wait for earlier device work, no stream ever waiting for a host (one hardware queue: the simulated GPU aborts on such a wait),
// calls that differ, graph capture, and a rank that leaves while another waits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
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

// The exact sum of the n ranks' inputs, doubled `times` times (in-place all-reduces
// repeated: each after the first doubles what every rank holds; exact in float).
std::vector<float> doubledSum(int n, size_t count, int times) {
  std::vector<float> v = refSum(n, count);
  for (float& x : v) x = std::ldexp(x, times);
  return v;
}

// `n` ranks as threads, every one on GPU 0 with a stream and a communicator, each
// running `body(rank, comm, stream)`, which ends its communicator (destroy or abort).
template <typename F>
std::string onGpu0(int n, F body, double timeoutSec = 120) {
  return failures(runRanks(Mode::kThreads, n, [&](int rank, int nranks, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(0);
    void* s = device::streamCreate();
    ncclComm_t comm = nullptr;
    std::string err = ncclCommInitRank(&comm, nranks, id, rank) == ncclSuccess
                          ? body(rank, comm, static_cast<cudaStream_t>(s))
                          : "init failed: " + std::string(ncclGetLastError(nullptr));
    device::streamDestroy(s);
    return err.empty() ? "" : "rank " + std::to_string(rank) + ": " + err;
  }, timeoutSec));
}

// ncclCommInitAll on GPU 0 three times, one thread, one stream for every rank: the
// group's operations meet inside one call.
TEST(SharedGpu, OneThreadDrivesEveryRankOnOneStream) {
  REQUIRE_GPU();
  const int n = 3;
  const size_t count = 4099;
  device::setCurrentDevice(0);
  std::vector<ncclComm_t> comms(n);
  int devs[n] = {0, 0, 0};
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs), ncclSuccess) << ncclGetLastError(nullptr);
  auto stream = static_cast<cudaStream_t>(device::streamCreate());
  std::vector<DeviceBuffer> in, out;
  for (int r = 0; r < n; ++r) {
    in.emplace_back(count * sizeof(float));
    out.emplace_back(count * n * sizeof(float));
    uploadFloats(in[r].p, refInput(n, r, count));
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) ncclAllReduce(in[r].p, out[r].p, count, ncclFloat32, ncclSum, comms[r], stream);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  device::streamSynchronize(stream);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(compareFloats(downloadFloats(out[r].p, count), refSum(n, count), "all-reduce rank " + std::to_string(r)), "");
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) ncclAllGather(in[r].p, out[r].p, count, ncclFloat32, comms[r], stream);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  device::streamSynchronize(stream);
  std::vector<float> gathered = concat({refInput(n, 0, count), refInput(n, 1, count), refInput(n, 2, count)});
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(compareFloats(downloadFloats(out[r].p, count * n), gathered, "all-gather rank " + std::to_string(r)), "");
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  device::streamDestroy(stream);
}

// One thread drives every rank on one stream and captures the group into a CUDA
// graph (every rank's stream is in the one capture, so rank 0's stream may run the
// whole operation inside it): an all-reduce out of place and an in-place all-to-all
// (whose inputs go through scratch memory the replays keep using), replayed three
// times with new inputs, exact every time.
TEST(SharedGpu, OneThreadCapturesEveryRankAndReplaysExactly) {
  REQUIRE_GPU();
  const int n = 3;
  const size_t count = 1000;
  device::setCurrentDevice(0);
  std::vector<ncclComm_t> comms(n);
  int devs[n] = {0, 0, 0};
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs), ncclSuccess) << ncclGetLastError(nullptr);
  void* stream = device::streamCreate();
  auto cs = static_cast<cudaStream_t>(stream);
  std::vector<DeviceBuffer> in, out, all;
  for (int r = 0; r < n; ++r) {
    in.emplace_back(count * sizeof(float));
    out.emplace_back(count * sizeof(float));
    all.emplace_back(count * n * sizeof(float));
  }
  std::string err;
  void* graph = captureGroup(stream, comms[0], [&] {
    bool ok = ncclGroupStart() == ncclSuccess;
    for (int r = 0; r < n; ++r) ok = ok && ncclAllReduce(in[r].p, out[r].p, count, ncclFloat32, ncclSum, comms[r], cs) == ncclSuccess;
    for (int r = 0; r < n; ++r) ok = ok && ncclAlltoAll(all[r].p, all[r].p, count / n, ncclFloat32, comms[r], cs) == ncclSuccess;
    return ncclGroupEnd() == ncclSuccess && ok;
  }, &err);
  ASSERT_NE(graph, nullptr) << err;
  const size_t block = count / n;
  for (int k = 1; k <= 3; ++k) {
    // Replay k's data: its own positions of the reference data; rank r's block q is tagged (r, q).
    for (int r = 0; r < n; ++r) {
      uploadFloats(in[r].p, refInput(n, r, count, k * count));
      std::vector<std::vector<float>> blocks;
      for (int q = 0; q < n; ++q) blocks.push_back(refMoved(r * n + q, block, k * block));
      uploadFloats(all[r].p, concat(blocks));
    }
    device::graphLaunch(graph, stream);
    device::streamSynchronize(stream);
    std::string replay = "replay " + std::to_string(k) + ", rank ";
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(compareFloats(downloadFloats(out[r].p, count), refSum(n, count, k * count),
                              replay + std::to_string(r) + " all-reduce"), "");
      std::vector<std::vector<float>> blocks;  // block q: rank q's block r
      for (int q = 0; q < n; ++q) blocks.push_back(refMoved(q * n + r, block, k * block));
      EXPECT_EQ(compareFloats(downloadFloats(all[r].p, block * n), concat(blocks), replay + std::to_string(r) + " all-to-all"),
                "");
    }
  }
  device::graphDestroy(graph);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  device::streamDestroy(stream);
}

// Chained in-place all-reduces, each rank alternating between two streams and never
// synchronising until the end: every result must be ordered after the last one.
TEST(SharedGpu, ChainedCallsOnStreamsThatChangeStayInOrder) {
  REQUIRE_GPU();
  EXPECT_EQ(onGpu0(2, [](int rank, ncclComm_t comm, cudaStream_t own) -> std::string {
    void* other = device::streamCreate();
    cudaStream_t s[2] = {own, static_cast<cudaStream_t>(other)};
    const size_t count = 1 << 22;  // kernels long enough to overlap the next call's if nothing orders them
    DeviceBuffer d(count * sizeof(float));
    uploadFloats(d.p, refInput(2, rank, count));
    for (int i = 0; i < 12; ++i)  // the sum, then doubled 11 times (exact in float)
      RANK_NCCL(ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, s[(i + rank) % 2]));
    for (cudaStream_t x : s) device::streamSynchronize(x);
    device::streamDestroy(other);
    ncclCommDestroy(comm);
    return compareFloats(downloadFloats(d.p, count), doubledSum(2, count, 11), "after 12 all-reduces");
  }), "");
}

// A host-buffer operation after device collectives waits for them (as it waits for
// the proxy's jobs): the device results are there when it returns, with no stream
// synchronised by the caller.
TEST(SharedGpu, AHostOperationWaitsForEarlierDeviceWork) {
  REQUIRE_GPU();
  EXPECT_EQ(onGpu0(2, [](int rank, ncclComm_t comm, cudaStream_t s) -> std::string {
    const size_t count = 1 << 22;
    DeviceBuffer d(count * sizeof(float));
    uploadFloats(d.p, refInput(2, rank, count));
    for (int i = 0; i < 16; ++i)  // the sum doubled 15 times, queued faster than the stream runs them
      RANK_NCCL(ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, s));
    int word[2] = {rank, 0};
    RANK_NCCL(ncclAllReduce(&word[0], &word[1], 1, ncclInt32, ncclSum, comm, nullptr));
    std::vector<float> got = downloadFloats(d.p, count);  // no stream synchronised
    device::streamSynchronize(s);
    ncclCommDestroy(comm);
    return word[1] == 1 ? compareFloats(got, doubledSum(2, count, 15), "after the host all-reduce") : "host all-reduce wrong";
  }), "");
}

// In place: an all-to-all whose every rank's output is its input (each block must
// be sent before it is overwritten), a gather whose root's input is its block of
// the output, a scatter whose root's output is its block of the input. Values
// name the sending rank and block, so a block read after it was overwritten shows.
TEST(SharedGpu, PairwiseCollectivesInPlaceAreExact) {
  REQUIRE_GPU();
  EXPECT_EQ(onGpu0(3, [](int rank, ncclComm_t comm, cudaStream_t s) -> std::string {
    const int n = 3, root = 1;
    const size_t count = 1000;  // 4000-byte blocks: off 16-byte multiples past the first
    DeviceBuffer d(count * n * sizeof(float));
    auto blocks = [&](const std::function<int(int)>& tag) {  // block q holds the piece tagged tag(q)
      std::vector<std::vector<float>> b;
      for (int q = 0; q < n; ++q) b.push_back(refMoved(tag(q), count));
      return concat(b);
    };
    uploadFloats(d.p, blocks([&](int q) { return rank * n + q; }));  // (sender, block)
    RANK_NCCL(ncclAlltoAll(d.p, d.p, count, ncclFloat32, comm, s));
    device::streamSynchronize(s);
    // block q now holds rank q's block `rank`
    auto e = compareFloats(downloadFloats(d.p, count * n), blocks([&](int q) { return q * n + rank; }), "all-to-all in place");
    if (!e.empty()) return e;
    // Gather: every rank's block `rank`, which now holds its own block `rank`
    // (in place at the root: already there).
    RANK_NCCL(ncclGather(d.at(rank * count * sizeof(float)), d.p, count, ncclFloat32, root, comm, s));
    device::streamSynchronize(s);
    if (rank == root) {
      e = compareFloats(downloadFloats(d.p, count * n), blocks([&](int q) { return q * n + q; }), "gather in place");
      if (!e.empty()) return e;
    }
    // Scatter: the root's block q (tagged 100 + q) to rank q (in place at the root).
    uploadFloats(d.p, blocks([&](int q) { return rank == root ? 100 + q : 200 + q; }));
    RANK_NCCL(ncclScatter(d.p, d.at(rank * count * sizeof(float)), count, ncclFloat32, root, comm, s));
    device::streamSynchronize(s);
    std::vector<float> got = downloadFloats(d.at(rank * count * sizeof(float)), count);
    ncclCommDestroy(comm);
    return compareFloats(got, refMoved(100 + rank, count), "scatter in place");
  }), "");
}

// The most ranks DeviceShared takes (8: the reduce kernel's outputs in one launch)
// and one more (9: the blocking path): an all-reduce in place and out of place,
// and an all-gather, exact, with 16-byte-aligned and odd element counts.
TEST(SharedGpu, EightRanksAndNineAreExact) {
  REQUIRE_GPU();
  for (int n : {8, 9}) {
    EXPECT_EQ(onGpu0(n, [n](int rank, ncclComm_t comm, cudaStream_t s) -> std::string {
      for (size_t count : {size_t{4096}, size_t{1031}}) {
        DeviceBuffer a(count * sizeof(float)), b(count * sizeof(float)), c(count * sizeof(float)),
            all(count * n * sizeof(float));
        uploadFloats(a.p, refInput(n, rank, count));
        uploadFloats(c.p, refMoved(rank, count));
        RANK_NCCL(ncclAllReduce(a.p, b.p, count, ncclFloat32, ncclSum, comm, s));  // out of place
        RANK_NCCL(ncclAllReduce(a.p, a.p, count, ncclFloat32, ncclSum, comm, s));  // in place
        uploadFloats(all.p, std::vector<float>(count * n, -1.0f));
        RANK_NCCL(ncclAllGather(c.p, all.p, count, ncclFloat32, comm, s));
        device::streamSynchronize(s);
        std::string what = std::to_string(n) + " ranks, count " + std::to_string(count);
        std::vector<std::vector<float>> pieces;
        for (int q = 0; q < n; ++q) pieces.push_back(refMoved(q, count));
        if (auto e = compareFloats(downloadFloats(b.p, count), refSum(n, count), "all-reduce, " + what); !e.empty()) return e;
        if (auto e = compareFloats(downloadFloats(a.p, count), refSum(n, count), "all-reduce in place, " + what); !e.empty())
          return e;
        if (auto e = compareFloats(downloadFloats(all.p, count * n), concat(pieces), "all-gather, " + what); !e.empty())
          return e;
      }
      ncclCommDestroy(comm);
      return "";
    }), "") << n << " ranks";
  }
}

// Rank 1's call differs from rank 0's (twice the count; another reduction): both
// calls fail, naming rank 1. (A count of zero is no operation at all, as with NCCL:
// the executor drops it before any algorithm sees it.)
TEST(SharedGpu, CallsThatDifferFailNamingTheRank) {
  REQUIRE_GPU();
  struct Case {
    size_t count1;
    ncclRedOp_t op1;
    const char* says;
  };
  for (Case c : {Case{2048, ncclSum, "rank 1 called"}, Case{1024, ncclMax, "rank 1 reduces with another operation"}}) {
    EXPECT_EQ(onGpu0(2, [&](int rank, ncclComm_t comm, cudaStream_t s) -> std::string {
      DeviceBuffer d(2048 * sizeof(float));
      ncclResult_t r = ncclAllReduce(d.p, d.p, rank == 0 ? 1024 : c.count1, ncclFloat32, rank == 0 ? ncclSum : c.op1,
                                     comm, s);
      std::string why = ncclGetLastError(comm);
      ncclCommAbort(comm);
      if (r != ncclInvalidUsage) return "returned " + std::to_string(r) + ": " + why;
      return why.find(c.says) != std::string::npos ? "" : "unclear error: " + why;
    }, 60), "") << c.says << ", count " << c.count1;
  }
}

// Rank 1 posts its all-reduce, then is aborted (from another of its threads) before
// rank 0 calls: rank 0's call fails naming rank 1, and never touches rank 1's
// buffers (its post was withdrawn; its memory may be freed by then).
TEST(SharedGpu, ARankAbortedAfterItsCallIsNotUsed) {
  REQUIRE_GPU();
  std::atomic<int> stage{0};
  EXPECT_EQ(onGpu0(2, [&](int rank, ncclComm_t comm, cudaStream_t s) -> std::string {
    const size_t count = 1024;
    DeviceBuffer d(count * sizeof(float));
    uploadFloats(d.p, refInput(2, rank, count));
    if (rank == 1) {
      ncclResult_t r = ncclSuccess;
      std::thread call([&] { r = ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, s); });
      usleep(200000);  // posted and waiting for rank 0
      ncclCommAbort(comm);
      call.join();
      stage = 1;
      return r == ncclSuccess ? "the all-reduce succeeded without rank 0" : "";
    }
    while (stage == 0) usleep(1000);
    ncclResult_t r = ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, s);
    std::string why = ncclGetLastError(comm);
    device::streamSynchronize(s);
    std::vector<float> got = downloadFloats(d.p, count);
    ncclCommAbort(comm);
    if (r == ncclSuccess) return "succeeded with an aborted rank; element 0 is " + std::to_string(got[0]);
    return why.find("rank 1") != std::string::npos ? "" : "unclear error: " + why;
  }, 60), "");
}

// A stream under capture: refused with a clear error on every rank, none left waiting.
TEST(SharedGpu, CaptureIsRefusedOnEveryRank) {
  REQUIRE_GPU();
  EXPECT_EQ(onGpu0(2, [](int, ncclComm_t comm, cudaStream_t s) -> std::string {
    DeviceBuffer d(1024 * sizeof(float));
    std::string err;
    void* g = captureGroup(s, comm, [&] {
      return ncclAllReduce(d.p, d.p, 1024, ncclFloat32, ncclSum, comm, s) == ncclSuccess;
    }, &err);
    ncclCommAbort(comm);
    if (g) {
      device::graphDestroy(g);
      return "the capture was not refused";
    }
    return err.find("CUDA graph") != std::string::npos ? "" : "unclear error: " + err;
  }, 60), "");
}

// Every rank but `leaver` waits in an all-reduce; `leaver` aborts its communicator
// once they all have (and 200 ms more) instead of calling. Each waiting call must
// end with an error naming `leaver`, well before STRATA_TIMEOUT.
std::string leavingReleasesTheOthers(int n, int leaver) {
  std::atomic<int> waiting{0};
  return onGpu0(n, [&](int rank, ncclComm_t comm, cudaStream_t s) -> std::string {
    DeviceBuffer d(1024 * sizeof(float));
    if (rank == leaver) {
      while (waiting < n - 1) usleep(1000);
      usleep(200000);
      ncclCommAbort(comm);
      return "";
    }
    ++waiting;
    auto t0 = std::chrono::steady_clock::now();
    ncclResult_t r = ncclAllReduce(d.p, d.p, 1024, ncclFloat32, ncclSum, comm, s);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string why = ncclGetLastError(comm);
    ncclCommAbort(comm);
    std::string named = "rank " + std::to_string(leaver);
    if (r == ncclSuccess) return "the all-reduce succeeded without " + named;
    if (sec > 10) return "released after " + std::to_string(sec) + " s";
    return why.find(named) != std::string::npos ? "" : "unclear error: " + why;
  }, 60);
}

// Rank 1 waits for rank 0, which aborts instead of calling.
TEST(SharedGpu, ARankThatLeavesReleasesTheOthers) {
  REQUIRE_GPU();
  EXPECT_EQ(leavingReleasesTheOthers(2, 0), "");
}

// Three ranks: rank 2 aborts while ranks 0 and 1 wait for it; both calls end,
// naming rank 2 (rank 0 finds it gone and tells rank 1).
TEST(SharedGpu, ALeavingRankReleasesEveryOther) {
  REQUIRE_GPU();
  EXPECT_EQ(leavingReleasesTheOthers(3, 2), "");
}

}  // namespace
}  // namespace strata::test
