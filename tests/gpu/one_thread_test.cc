// One thread driving several GPUs (nccl-tests -g, ncclCommInitAll, torch.cuda.nccl):
// a group over several communicators, each on a stream of its own GPU, runs as one
// device-driven kernel per stream launched from this thread, and captures into a
// graph per stream like a rank's own group (the host-staged path refuses capture).
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "device/gpu.h"
#include "gpu/gpu_util.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

struct Rank {
  ncclComm_t comm = nullptr;
  void* stream = nullptr;
  std::unique_ptr<DeviceBuffer> in, sum, gathered, ring;
};

// Every rank's all-reduce and all-gather in one group, then a ring of sends and
// receives in another; rank i's data is the reference input of rank i at the
// round's positions, so a piece from the wrong rank, place or round fails.
class OneThread {
 public:
  OneThread(int n, size_t count, bool mixed) : n_(n), count_(count), mixed_(mixed), ranks_(n) {}
  ~OneThread() {
    for (Rank& r : ranks_) {
      r.in.reset(), r.sum.reset(), r.gathered.reset(), r.ring.reset();
      if (r.comm) ncclCommDestroy(r.comm);
      if (r.stream) device::streamDestroy(r.stream);
    }
  }

  std::string init() {
    std::vector<ncclComm_t> comms(n_);
    std::vector<int> devs(n_);
    std::iota(devs.begin(), devs.end(), 0);
    if (ncclCommInitAll(comms.data(), n_, devs.data()) != ncclSuccess)
      return std::string("ncclCommInitAll: ") + ncclGetLastError(nullptr);
    for (int i = 0; i < n_; ++i) {
      Rank& r = ranks_[i];
      r.comm = comms[i];
      device::setCurrentDevice(i);
      r.stream = device::streamCreate();
      r.in = std::make_unique<DeviceBuffer>(count_ * sizeof(float));
      r.sum = std::make_unique<DeviceBuffer>(count_ * sizeof(float));
      r.gathered = std::make_unique<DeviceBuffer>(n_ * count_ * sizeof(float));
      r.ring = std::make_unique<DeviceBuffer>(count_ * sizeof(float));
    }
    return "";
  }

  // The collectives and the ring, every communicator's operations on its own stream:
  // in two groups, or (`mixed`) in one.
  std::string groups() {
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < n_ && r == ncclSuccess; ++i) {
      Rank& k = ranks_[i];
      auto s = static_cast<cudaStream_t>(k.stream);
      r = ncclAllReduce(k.in->p, k.sum->p, count_, ncclFloat32, ncclSum, k.comm, s);
      if (r == ncclSuccess) r = ncclAllGather(k.in->p, k.gathered->p, count_, ncclFloat32, k.comm, s);
    }
    if (!mixed_) {
      ncclResult_t end = ncclGroupEnd();
      if (r != ncclSuccess || end != ncclSuccess) return std::string("the collectives' group: ") + ncclGetLastError(nullptr);
      r = ncclGroupStart();
    }
    for (int i = 0; i < n_ && r == ncclSuccess; ++i) {
      Rank& k = ranks_[i];
      auto s = static_cast<cudaStream_t>(k.stream);
      r = ncclSend(k.in->p, count_, ncclFloat32, (i + 1) % n_, k.comm, s);
      if (r == ncclSuccess) r = ncclRecv(k.ring->p, count_, ncclFloat32, (i + n_ - 1) % n_, k.comm, s);
    }
    ncclResult_t end = ncclGroupEnd();
    if (r != ncclSuccess || end != ncclSuccess)
      return std::string(mixed_ ? "the group: " : "the ring's group: ") + ncclGetLastError(nullptr);
    return "";
  }

  void fill(int round) {
    for (int i = 0; i < n_; ++i) uploadFloats(ranks_[i].in->p, input(i, round));
  }

  void synchronize() {
    for (Rank& r : ranks_) device::streamSynchronize(r.stream);
  }

  std::string check(int round) {
    std::vector<std::vector<float>> all;
    for (int p = 0; p < n_; ++p) all.push_back(input(p, round));
    const std::string at = "round " + std::to_string(round) + ": rank ";
    for (int i = 0; i < n_; ++i) {
      std::string e = compareFloats(downloadFloats(ranks_[i].sum->p, count_), refSum(n_, count_, first(round)),
                                    at + std::to_string(i) + "'s all-reduce");
      if (e.empty())
        e = compareFloats(downloadFloats(ranks_[i].gathered->p, n_ * count_), concat(all),
                          at + std::to_string(i) + "'s all-gather");
      if (e.empty())
        e = compareFloats(downloadFloats(ranks_[i].ring->p, count_), all[(i + n_ - 1) % n_],
                          at + std::to_string(i) + "'s receive");
      if (!e.empty()) return e;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(ranks_[i].comm, &async);
      if (async != ncclSuccess) return at + std::to_string(i) + ": async error " + std::to_string(async);
    }
    return "";
  }

  // Captures both groups, a graph per stream; null with `err` set when refused.
  std::vector<void*> capture(std::string* err) {
    for (Rank& r : ranks_) device::graphBegin(r.stream);
    *err = groups();
    std::vector<void*> graphs;
    for (Rank& r : ranks_) {
      std::string why;
      void* g = device::graphEnd(r.stream, &why);
      if (!g && err->empty()) *err = "capture failed: " + why;
      graphs.push_back(g);
    }
    if (!err->empty()) {
      for (void* g : graphs)
        if (g) device::graphDestroy(g);
      return {};
    }
    return graphs;
  }

  void replay(const std::vector<void*>& graphs) {
    for (int i = 0; i < n_; ++i) {
      device::setCurrentDevice(i);
      device::graphLaunch(graphs[i], ranks_[i].stream);
    }
  }

 private:
  size_t first(int round) const { return static_cast<size_t>(round) * count_; }
  std::vector<float> input(int rank, int round) const { return refInput(n_, rank, count_, first(round)); }

  int n_;
  size_t count_;
  bool mixed_;
  std::vector<Rank> ranks_;
};

std::string eagerThenReplayed(int n, size_t count, bool mixed) {
  OneThread t(n, count, mixed);
  std::string err = t.init();
  for (int round = 0; round < 2 && err.empty(); ++round) {  // eager, twice
    t.fill(round);
    err = t.groups();
    t.synchronize();
    if (err.empty()) err = t.check(round);
  }
  if (!err.empty()) return "eager: " + err;
  std::vector<void*> graphs = t.capture(&err);
  if (!err.empty()) return "captured: " + err;
  for (int round = 2; round < 4 && err.empty(); ++round) {
    t.fill(round);
    t.replay(graphs);
    t.synchronize();
    err = t.check(round);
  }
  for (void* g : graphs) device::graphDestroy(g);
  return err.empty() ? "" : "replayed: " + err;
}

// A process of its own (CUDA initialised in it, and killed should it hang).
void runOneThread(bool mixed) {
  const int n = std::min(gpusVisible(), 4);
  for (size_t count : {size_t{1031}, size_t{300007}})
    EXPECT_EQ(failures(runRanks(Mode::kProcesses, 1,
                                [&](int, int, const ncclUniqueId&) { return eagerThenReplayed(n, count, mixed); }, 120)),
              "")
        << n << " GPUs, " << count << " floats each";
}

TEST(DeviceDrivenOneThread, AGroupOverEveryGpuIsAKernelPerStreamAndCaptures) {
  REQUIRE_GPUS(2);
  runOneThread(false);
}

// Collectives and sends and receives in one group: each communicator's collective
// kernels, then its point-to-point kernel, on its stream (every rank in that order).
TEST(DeviceDrivenOneThread, AGroupMixingCollectivesWithSendsAndReceivesCaptures) {
  REQUIRE_GPUS(2);
  runOneThread(true);
}

}  // namespace
}  // namespace strata::test
