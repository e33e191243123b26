// The GPU path (label "gpu"; every test skips, saying why, where no GPU is
// visible). The kernels against the CPU bit for bit; every collective, type and op
// on device buffers through the C API, 1-4 ranks on one GPU, as threads and as
// processes, in place and out of place, checked exactly, and a rank on each of
// several GPUs; graph capture; ranks sharing a GPU (stream order: gpu_streams_test.cc). The same tests run on simulated GPUs (STRATA_GPU_SIM=1, label
// "multiproc"), which exercises the device path's logic on machines without one.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/cpu_reduce.h"
#include "device/dtypes.h"
#include "device/gpu.h"
#include "gpu/gpu_util.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "verify/reference.h"

#ifdef STRATA_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace strata::test {
namespace {

using verify::TestOp;

device::ReduceOp reduceOpFor(TestOp op, int nranks) {
  device::ReduceOp r;
  switch (op) {
    case TestOp::kProd: r.kind = device::ReduceKind::kProd; break;
    case TestOp::kMax: r.kind = device::ReduceKind::kMax; break;
    case TestOp::kMin: r.kind = device::ReduceKind::kMin; break;
    case TestOp::kAvg: r.postDivide = nranks; break;
    case TestOp::kPreMulHost:
    case TestOp::kPreMulDevice:
      r.preMultiply = true;
      r.scalarF = verify::kPreMulScalar;
      r.scalarI = static_cast<int64_t>(verify::kPreMulScalar);
      break;
    default: break;
  }
  return r;
}

// gpuReduceInOrder / gpuPrepare give the CPU's bits for every type, op, input
// count (9 takes two launches) and alignment (offset 1 takes the scalar path).
TEST(GpuKernels, MatchTheCpuBitForBit) {
  REQUIRE_GPU();
  if (simulated()) GTEST_SKIP() << "simulated GPUs run the CPU functions themselves";
  device::setCurrentDevice(0);
  for (int t = 0; t < ncclNumTypes; ++t)
    for (TestOp op : verify::kAllOps)
      for (int n : {1, 2, 3, 9})
        for (size_t count : {size_t{1}, size_t{31}, size_t{4099}})
          for (size_t offset : {size_t{0}, size_t{1}}) {
            auto type = static_cast<ncclDataType_t>(t);
            size_t es = device::dtypeSize(type), bytes = (count + offset) * es;
            device::ReduceOp rop = reduceOpFor(op, n);
            std::vector<std::vector<char>> in;
            std::vector<std::unique_ptr<DeviceBuffer>> dev;
            std::vector<const void*> hostIn, devIn;
            for (int j = 0; j < n; ++j) {
              in.push_back(verify::makeBuffer(type, count + offset, [&](size_t i) { return verify::inputValue(n, j, i, type, op); }));
              dev.push_back(std::make_unique<DeviceBuffer>(bytes));
              upload(dev[j]->p, in[j]);
              hostIn.push_back(in[j].data() + offset * es);
              devIn.push_back(dev[j]->at(offset * es));
            }
            DeviceBuffer out(bytes);
            std::vector<char> want(count * es);
            char* dst = out.at(offset * es);
            void* s = device::streamCreate();
            if (op == TestOp::kPreMulHost || op == TestOp::kPreMulDevice) {
              device::prepare(want.data(), hostIn[0], count, type, rop);
              device::gpuPrepare(dst, devIn[0], count, type, rop, s);
            } else {
              device::reduceInOrder(want.data(), hostIn.data(), n, count, type, rop);
              device::gpuReduceInOrder(dst, devIn.data(), n, count, type, rop, s);
            }
            device::streamSynchronize(s);
            device::streamDestroy(s);
            std::vector<char> got = download(dst, count * es);
            std::string what = std::string(device::dtypeName(type)) + " " + verify::opName(op) + " n=" +
                               std::to_string(n) + " count=" + std::to_string(count) + " offset=" + std::to_string(offset);
            EXPECT_EQ(verify::compareBuffers(type, got.data(), want.data(), count, what), "");
          }
}

// One reduce kernel writing several outputs (DeviceShared's all-reduce, broadcast and
// all-gather): every output gets the CPU's bits, an output may be an input at the
// same position (in place: every input is read before it is written), 9 inputs fold
// into the first output, and a one-input uint8 "reduce" copies bits exactly (odd
// sizes take the element tail). Runs on real and simulated GPUs.
TEST(GpuReduceOutputs, EveryOutputGetsTheSameBitsAndAnOutputMayBeAnInput) {
  REQUIRE_GPU();
  device::setCurrentDevice(0);
  void* s = device::streamCreate();
  struct Case {
    ncclDataType_t type;
    TestOp op;
    int n, nOut;
    size_t count;
    bool inPlace;  // output 1 is input 1
  };
  for (const Case& c : {Case{ncclFloat32, TestOp::kSum, 3, 3, 4099, true}, Case{ncclBfloat16, TestOp::kSum, 2, 2, 8200, true},
                        Case{ncclInt32, TestOp::kMax, 8, 8, 1031, true}, Case{ncclFloat64, TestOp::kAvg, 4, 4, 517, false},
                        Case{ncclFloat32, TestOp::kProd, 9, 2, 300, false}, Case{ncclUint8, TestOp::kSum, 1, 5, 4099, false}}) {
    const size_t es = device::dtypeSize(c.type), bytes = c.count * es;
    std::vector<std::vector<char>> in;
    std::vector<std::unique_ptr<DeviceBuffer>> dev;
    std::vector<const void*> hostIn, devIn;
    for (int j = 0; j < c.n; ++j) {
      in.push_back(verify::makeBuffer(c.type, c.count, [&](size_t i) { return verify::inputValue(c.n, j, i, c.type, c.op); }));
      dev.push_back(std::make_unique<DeviceBuffer>(bytes));
      upload(dev[j]->p, in[j]);
      hostIn.push_back(in[j].data());
      devIn.push_back(dev[j]->p);
    }
    std::vector<std::unique_ptr<DeviceBuffer>> outBufs;
    std::vector<void*> outs;
    for (int m = 0; m < c.nOut; ++m) {
      outBufs.push_back(std::make_unique<DeviceBuffer>(bytes));
      outs.push_back(c.inPlace && m == 1 ? dev[1]->p : outBufs[m]->p);
    }
    device::ReduceOp rop = reduceOpFor(c.op, c.n);
    std::vector<char> want(bytes);
    device::reduceInOrder(want.data(), hostIn.data(), c.n, c.count, c.type, rop);
    device::gpuReduceInOrder(outs.data(), c.nOut, devIn.data(), c.n, c.count, c.type, rop, s);
    device::streamSynchronize(s);
    for (int m = 0; m < c.nOut; ++m) {
      std::vector<char> got = download(outs[m], bytes);
      std::string what = std::string(device::dtypeName(c.type)) + " " + verify::opName(c.op) + " n=" +
                         std::to_string(c.n) + " output " + std::to_string(m) + (c.inPlace && m == 1 ? " (in place)" : "");
      EXPECT_EQ(verify::compareBuffers(c.type, got.data(), want.data(), c.count, what), "");
    }
  }
  device::streamDestroy(s);
}

struct Rank {
  ncclComm_t comm;
  void* stream;
  int rank, n;
};

ncclRedOp_t ncclOpFor(TestOp op) {
  switch (op) {
    case TestOp::kProd: return ncclProd;
    case TestOp::kMax: return ncclMax;
    case TestOp::kMin: return ncclMin;
    case TestOp::kAvg: return ncclAvg;
    default: return ncclSum;
  }
}

std::string sync(const Rank& r) {
  device::streamSynchronize(r.stream);
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(r.comm, &async);
  return async == ncclSuccess ? "" : "async error " + std::to_string(async);
}

std::string compare(ncclDataType_t type, const void* dev, size_t count, const std::function<double(size_t)>& want,
                    const std::string& what) {
  auto got = download(dev, count * device::dtypeSize(type));
  auto expected = verify::makeBuffer(type, count, want);
  return verify::compareBuffers(type, got.data(), expected.data(), count, what);
}

// The reductions (all-reduce, reduce-scatter, reduce) for one type and op.
std::string checkReductions(const Rank& r, ncclDataType_t type, TestOp op, bool inPlace, size_t count = 1031) {
  const size_t es = device::dtypeSize(type), n = static_cast<size_t>(r.n);
  std::vector<char> scalar = verify::makeBuffer(type, 1, [](size_t) { return verify::kPreMulScalar; });
  ncclRedOp_t redop = ncclOpFor(op);
  DeviceBuffer deviceScalar(es);  // ncclScalarDevice: read when the operation runs
  upload(deviceScalar.p, scalar);
  if (op == TestOp::kPreMulHost)
    RANK_NCCL(ncclRedOpCreatePreMulSum(&redop, scalar.data(), type, ncclScalarHostImmediate, r.comm));
  if (op == TestOp::kPreMulDevice)
    RANK_NCCL(ncclRedOpCreatePreMulSum(&redop, deviceScalar.p, type, ncclScalarDevice, r.comm));
  std::string tag = std::string(device::dtypeName(type)) + " " + verify::opName(op) + (inPlace ? " in place" : "");
  DeviceBuffer buf(count * n * es), out(count * n * es);
  std::string err;
  // All-reduce.
  upload(buf.p, verify::makeBuffer(type, count, [&](size_t i) { return verify::inputValue(r.n, r.rank, i, type, op); }));
  void* arOut = inPlace ? buf.p : out.p;
  RANK_NCCL(ncclAllReduce(buf.p, arOut, count, type, redop, r.comm, static_cast<cudaStream_t>(r.stream)));
  if ((err = sync(r)).empty())
    err = compare(type, arOut, count, [&](size_t i) { return verify::reducedValue(r.n, i, type, op); }, "AllReduce " + tag);
  // Reduce-scatter: rank q keeps block q; in place, the output is the rank's block of the input.
  if (err.empty()) {
    upload(buf.p, verify::makeBuffer(type, count * n, [&](size_t i) { return verify::inputValue(r.n, r.rank, i, type, op); }));
    void* rsOut = inPlace ? buf.at(r.rank * count * es) : out.p;
    RANK_NCCL(ncclReduceScatter(buf.p, rsOut, count, type, redop, r.comm, static_cast<cudaStream_t>(r.stream)));
    if ((err = sync(r)).empty())
      err = compare(type, rsOut, count, [&](size_t i) { return verify::reducedValue(r.n, r.rank * count + i, type, op); },
                    "ReduceScatter " + tag);
  }
  // Reduce to the last rank.
  if (err.empty()) {
    int root = r.n - 1;
    upload(buf.p, verify::makeBuffer(type, count, [&](size_t i) { return verify::inputValue(r.n, r.rank, i, type, op); }));
    void* rOut = inPlace ? buf.p : out.p;
    RANK_NCCL(ncclReduce(buf.p, rOut, count, type, redop, root, r.comm, static_cast<cudaStream_t>(r.stream)));
    if ((err = sync(r)).empty() && r.rank == root)
      err = compare(type, rOut, count, [&](size_t i) { return verify::reducedValue(r.n, i, type, op); }, "Reduce " + tag);
  }
  if (op == TestOp::kPreMulHost || op == TestOp::kPreMulDevice) RANK_NCCL(ncclRedOpDestroy(redop, r.comm));
  return err;
}

// The data movements (all-gather, broadcast, all-to-all, gather, scatter,
// send/recv) for one type.
std::string checkMovement(const Rank& r, ncclDataType_t type, bool inPlace, size_t count = 777) {
  const size_t es = device::dtypeSize(type), n = static_cast<size_t>(r.n);
  auto cs = static_cast<cudaStream_t>(r.stream);
  std::string tag = std::string(device::dtypeName(type)) + (inPlace ? " in place" : "");
  DeviceBuffer buf(count * n * es), out(count * n * es);
  auto mine = [&](size_t i) { return verify::movedValue(r.rank, i, type); };
  std::string err;
  void* agOut = inPlace ? buf.p : out.p;
  void* agIn = inPlace ? buf.at(r.rank * count * es) : buf.p;
  upload(agIn, verify::makeBuffer(type, count, mine));
  RANK_NCCL(ncclAllGather(agIn, agOut, count, type, r.comm, cs));
  if ((err = sync(r)).empty())
    err = compare(type, agOut, count * n, [&](size_t i) { return verify::movedValue(i / count, i % count, type); },
                  "AllGather " + tag);
  if (!err.empty()) return err;
  int root = r.n - 1;
  upload(buf.p, verify::makeBuffer(type, count, [&](size_t i) { return r.rank == root ? verify::movedValue(root, i, type) : -1; }));
  void* bOut = inPlace ? buf.p : out.p;
  RANK_NCCL(ncclBroadcast(buf.p, bOut, count, type, root, r.comm, cs));
  if ((err = sync(r)).empty())
    err = compare(type, bOut, count, [&](size_t i) { return verify::movedValue(root, i, type); }, "Broadcast " + tag);
  if (!err.empty() || inPlace) return err;  // all-to-all and send/recv: out of place only, as NCCL
  upload(buf.p, verify::makeBuffer(type, count * n, [&](size_t i) { return verify::movedValue(r.rank * r.n + static_cast<int>(i / count), i % count, type); }));
  RANK_NCCL(ncclAlltoAll(buf.p, out.p, count, type, r.comm, cs));
  if ((err = sync(r)).empty())
    err = compare(type, out.p, count * n,
                  [&](size_t i) { return verify::movedValue(static_cast<int>(i / count) * r.n + r.rank, i % count, type); },
                  "AllToAll " + tag);
  if (!err.empty()) return err;
  // Gather to and scatter from the last rank.
  upload(buf.p, verify::makeBuffer(type, count, mine));
  RANK_NCCL(ncclGather(buf.p, out.p, count, type, root, r.comm, cs));
  if ((err = sync(r)).empty() && r.rank == root)
    err = compare(type, out.p, count * n, [&](size_t i) { return verify::movedValue(static_cast<int>(i / count), i % count, type); },
                  "Gather " + tag);
  if (!err.empty()) return err;
  upload(buf.p, verify::makeBuffer(type, count * n, [&](size_t i) { return verify::movedValue(root * r.n + static_cast<int>(i / count), i % count, type); }));
  RANK_NCCL(ncclScatter(buf.p, out.p, count, type, root, r.comm, cs));
  if ((err = sync(r)).empty())
    err = compare(type, out.p, count, [&](size_t i) { return verify::movedValue(root * r.n + r.rank, i, type); },
                  "Scatter " + tag);
  if (!err.empty()) return err;
  upload(buf.p, verify::makeBuffer(type, count, mine));
  int next = (r.rank + 1) % r.n, prev = (r.rank + r.n - 1) % r.n;
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclSend(buf.p, count, type, next, r.comm, cs));
  RANK_NCCL(ncclRecv(out.p, count, type, prev, r.comm, cs));
  RANK_NCCL(ncclGroupEnd());
  if ((err = sync(r)).empty())
    err = compare(type, out.p, count, [&](size_t i) { return verify::movedValue(prev, i, type); }, "SendRecv " + tag);
  return err;
}

// Larger than a chunk of both paths (4 MiB staged, 16 MiB GPU to GPU), and not a
// multiple of either: all-reduce, broadcast and reduce, in place.
std::string checkLarge(const Rank& r) {
  const size_t count = (5 << 20) + 3;
  const ncclDataType_t type = ncclFloat32;
  auto cs = static_cast<cudaStream_t>(r.stream);
  DeviceBuffer buf(count * sizeof(float));  // every path below syncs before it is freed
  upload(buf.p, verify::makeBuffer(type, count, [&](size_t i) { return verify::inputValue(r.n, r.rank, i, type, TestOp::kSum); }));
  RANK_NCCL(ncclAllReduce(buf.p, buf.p, count, type, ncclSum, r.comm, cs));
  std::string err = sync(r);
  if (err.empty())
    err = compare(type, buf.p, count, [&](size_t i) { return verify::reducedValue(r.n, i, type, TestOp::kSum); }, "large AllReduce");
  if (!err.empty()) return err;
  int root = r.n - 1;
  upload(buf.p, verify::makeBuffer(type, count, [&](size_t i) { return r.rank == root ? verify::movedValue(root, i, type) : -1; }));
  RANK_NCCL(ncclBroadcast(buf.p, buf.p, count, type, root, r.comm, cs));
  if ((err = sync(r)).empty())
    err = compare(type, buf.p, count, [&](size_t i) { return verify::movedValue(root, i, type); }, "large Broadcast");
  if (!err.empty()) return err;
  upload(buf.p, verify::makeBuffer(type, count, [&](size_t i) { return verify::inputValue(r.n, r.rank, i, type, TestOp::kMax); }));
  RANK_NCCL(ncclReduce(buf.p, buf.p, count, type, ncclMax, 0, r.comm, cs));
  if ((err = sync(r)).empty() && r.rank == 0)
    err = compare(type, buf.p, count, [&](size_t i) { return verify::reducedValue(r.n, i, type, TestOp::kMax); }, "large Reduce");
  return err;
}

// Every collective, type and op on device buffers of GPU `gpu`.
std::string checksOn(int gpu, int rank, int nranks, const ncclUniqueId& id) {
  device::setCurrentDevice(gpu);
  Rank r{nullptr, device::streamCreate(), rank, nranks};
  RANK_NCCL(ncclCommInitRank(&r.comm, nranks, id, rank));
  int dev = -1;
  RANK_NCCL(ncclCommCuDevice(r.comm, &dev));
  std::string err = dev == gpu ? "" : "ncclCommCuDevice says " + std::to_string(dev) + ", expected " + std::to_string(gpu);
  if (err.empty()) err = checkLarge(r);
  for (bool inPlace : {false, true})
    for (int t = 0; t < ncclNumTypes && err.empty(); ++t) {
      auto type = static_cast<ncclDataType_t>(t);
      for (TestOp op : verify::kAllOps)
        if (err.empty()) err = checkReductions(r, type, op, inPlace);
      if (err.empty()) err = checkMovement(r, type, inPlace);
    }
  ncclCommDestroy(r.comm);
  device::streamDestroy(r.stream);
  return err.empty() ? "" : "rank " + std::to_string(rank) + ": " + err;
}

// Sizes that cross the device-driven kernel's rounds (512 KiB slots: a one-shot
// round per slot of the piece, a two-shot round per slot of each rank's slice),
// not multiples of a vector, for a float, a 2-byte and an integer type: every op and
// collective just over one slot; at 2-4 MiB (4-8 rounds, past a slot per slice for 8
// ranks) each op on one type at least, the movements on one (all of it took 2x as long).
std::string roundsRank(int rank, int nranks, const ncclUniqueId& id) {
  device::setCurrentDevice(rank % device::gpuCount());
  Rank r{nullptr, device::streamCreate(), rank, nranks};
  RANK_NCCL(ncclCommInitRank(&r.comm, nranks, id, rank));
  std::string err;
  const std::vector<TestOp> allOps{TestOp::kSum, TestOp::kAvg, TestOp::kPreMulDevice};
  for (ncclDataType_t type : {ncclFloat32, ncclBfloat16, ncclInt32}) {
    std::vector<TestOp> largeOps = type == ncclFloat32    ? std::vector<TestOp>{TestOp::kAvg, TestOp::kPreMulDevice}
                                   : type == ncclBfloat16 ? std::vector<TestOp>{TestOp::kPreMulDevice}
                                                          : std::vector<TestOp>{TestOp::kSum};
    for (bool large : {false, true}) {
      size_t count = large ? (size_t{1} << 20) + 7 : (size_t{640} << 10) / device::dtypeSize(type) + 3;
      for (bool inPlace : {false, true}) {
        for (TestOp op : large ? largeOps : allOps)
          if (err.empty()) err = checkReductions(r, type, op, inPlace, count);
        if (err.empty() && (!large || type == ncclInt32)) err = checkMovement(r, type, inPlace, count);
      }
    }
  }
  ncclCommDestroy(r.comm);
  device::streamDestroy(r.stream);
  return err.empty() ? "" : "rank " + std::to_string(rank) + ": " + err;
}

// Every rank on the one GPU: Strata allows it, NCCL does not.
std::string deviceRank(int rank, int nranks, const ncclUniqueId& id) { return checksOn(0, rank, nranks, id); }
// Each rank on a GPU of its own where there are enough (rank % GPUs), as jobs run.
std::string ownGpuRank(int rank, int nranks, const ncclUniqueId& id) {
  return checksOn(rank % device::gpuCount(), rank, nranks, id);
}

class GpuCollectives : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(GpuCollectives, ExactResultsOnDeviceBuffers) {
  REQUIRE_GPU();
  auto [mode, n] = GetParam();
  EXPECT_EQ(failures(runRanks(mode, n, deviceRank, 600)), "");
}

INSTANTIATE_TEST_SUITE_P(OneGpu, GpuCollectives,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses), ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::string(modeName(std::get<0>(info.param))) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Ranks on different GPUs: threads of one process reach each other's device memory
// only with peer access enabled (a real GPU faults otherwise; the simulated ones
// refuse the kernel), processes through CUDA IPC.
class ManyGpus : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(ManyGpus, ExactResultsWithEachRankOnItsOwnGpu) {
  REQUIRE_GPU();
  auto [mode, n] = GetParam();
  if (gpusVisible() < n) GTEST_SKIP() << "needs " << n << " GPUs; " << gpusVisible() << " visible";
  EXPECT_EQ(failures(runRanks(mode, n, ownGpuRank, 600)), "");
}

TEST_P(ManyGpus, ExactAcrossTheKernelsRounds) {
  REQUIRE_GPU();
  auto [mode, n] = GetParam();
  if (gpusVisible() < n) GTEST_SKIP() << "needs " << n << " GPUs; " << gpusVisible() << " visible";
  EXPECT_EQ(failures(runRanks(mode, n, roundsRank, 600)), "");
}

INSTANTIATE_TEST_SUITE_P(Spread, ManyGpus,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses), ::testing::Values(2, 4, 8)),
                         [](const auto& info) {
                           return std::string(modeName(std::get<0>(info.param))) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Ranks sharing one GPU in one process, on two communicators: rank 1 waits in
// communicator B's all-reduce for rank 0, who first destroys communicator A. When
// such ranks held their streams on the GPU (a proxy's flag wait), a free that
// synchronised the device there (cudaFreeHost of A's flags) waited for rank 1's
// stream, which waited for rank 0; now they wait in the call (runBlocking), and
// nothing A's destruction frees may wait for B.
TEST(GpuSharing, DestroyingOneCommunicatorWhileAnotherWaitsOnTheGpu) {
  REQUIRE_GPU();
  ncclUniqueId idB;
  ASSERT_EQ(ncclGetUniqueId(&idB), ncclSuccess);
  std::atomic<bool> enqueued{false};
  auto results = runRanks(Mode::kThreads, 2, [&](int rank, int n, const ncclUniqueId& idA) -> std::string {
    device::setCurrentDevice(0);
    auto s = static_cast<cudaStream_t>(device::streamCreate());
    ncclComm_t a = nullptr, b = nullptr;
    RANK_NCCL(ncclCommInitRank(&a, n, idA, rank));
    RANK_NCCL(ncclCommInitRank(&b, n, idB, rank));
    const size_t count = 1 << 16;
    DeviceBuffer d(count * sizeof(float));
    uploadFloats(d.p, refInput(n, rank, count));
    RANK_NCCL(ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, a, s));  // A's proxy has its flags now
    device::streamSynchronize(s);
    if (rank == 1) {  // ranks sharing a GPU wait in the call itself (DeviceProxy::runBlocking)
      enqueued = true;
      RANK_NCCL(ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, b, s));
    } else {
      while (!enqueued) usleep(1000);
      usleep(50000);  // rank 1 waits in B's all-reduce by now
      RANK_NCCL(ncclCommDestroy(a));
      a = nullptr;
      RANK_NCCL(ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, b, s));
    }
    device::streamSynchronize(s);
    std::vector<float> got = downloadFloats(d.p, count), want = refSum(n, count);
    for (float& x : want) x *= 2;  // the sum, summed again
    if (a) ncclCommDestroy(a);
    ncclCommDestroy(b);
    device::streamDestroy(s);
    return compareFloats(got, want, "two all-reduces");
  }, 120);
  EXPECT_EQ(failures(results), "");
}

// A process that exits without ncclCommDestroy (common under PyTorch) after device
// collectives, direct and staged through the host: exit() runs the static
// destructors while the communicator, its proxy thread and its device memory are
// still there, and must neither abort (a joinable thread destroyed at exit calls
// std::terminate) nor crash or hang.
TEST(GpuLifetime, AProcessThatExitsWithoutDestroyingItsCommunicatorExitsCleanly) {
  REQUIRE_GPU();
  for (const char* p2p : {"0", "1"}) {
    auto results = runRanks(
        Mode::kProcesses, 2,
        [](int rank, int n, const ncclUniqueId& id) -> std::string {
          device::setCurrentDevice(0);
          void* s = device::streamCreate();
          ncclComm_t comm;
          RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
          const size_t count = 1 << 16;
          DeviceBuffer d(count * sizeof(float));
          uploadFloats(d.p, refInput(n, rank, count));
          for (int i = 0; i < 3; ++i)
            RANK_NCCL(ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, static_cast<cudaStream_t>(s)));
          device::streamSynchronize(s);
          std::vector<float> want = refSum(n, count);
          for (float& x : want) x *= 4;  // the sum, then doubled twice
          if (auto e = compareFloats(downloadFloats(d.p, count), want, "three all-reduces"); !e.empty()) return e;
          usleep(100000);  // the peer is done with this rank's memory too
          exit(0);         // no ncclCommDestroy, no stream or buffer freed: static destructors run
        },
        60,
        [p2p](int) {
          setenv("NCCL_P2P_DISABLE", p2p, 1);
          reloadEnvironment();
          return std::string();
        });
    EXPECT_EQ(failures(results), "") << "NCCL_P2P_DISABLE=" << p2p;
  }
}

// 2-byte elements split three ways: all-reduce slices of 1000 / 3 and reduce-scatter
// blocks of 1004 elements would start off 16-byte boundaries, where a GPU's reduce
// kernel leaves its vector path for an element-by-element loop. DeviceDirect rounds
// them to whole vectors; the simulated GPUs count every reduce launched unaligned.
TEST(GpuAlignment, TwoByteSlicesAndBlocksStayOnTheVectorPath) {
  REQUIRE_GPU();
  if (!simulated()) GTEST_SKIP() << "counts unaligned kernels on simulated GPUs (a GPU shows it as time)";
  auto bf16 = [](float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);  // exact for the small integers used here
  };
  uint64_t before = device::simulatedUnalignedKernels();
  auto results = runRanks(Mode::kThreads, 3, [&](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(0);
    void* s = device::streamCreate();
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    const size_t arCount = 1000, rsCount = 1004;
    DeviceBuffer in(rsCount * n * 2), out(rsCount * n * 2);
    std::vector<uint16_t> v(rsCount * n), got(rsCount * n);
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16(static_cast<float>(i % 7 + rank));
    device::copySync(in.p, v.data(), v.size() * 2);
    auto cs = static_cast<cudaStream_t>(s);
    RANK_NCCL(ncclAllReduce(in.p, out.p, arCount, ncclBfloat16, ncclSum, comm, cs));
    device::streamSynchronize(s);
    device::copySync(got.data(), out.p, arCount * 2);
    for (size_t i = 0; i < arCount; ++i)
      if (got[i] != bf16(static_cast<float>(3 * (i % 7) + 3))) return "all-reduce wrong at " + std::to_string(i);
    RANK_NCCL(ncclReduceScatter(in.p, out.p, rsCount, ncclBfloat16, ncclSum, comm, cs));
    device::streamSynchronize(s);
    device::copySync(got.data(), out.p, rsCount * 2);
    for (size_t i = 0; i < rsCount; ++i) {
      size_t g = rank * rsCount + i;
      if (got[i] != bf16(static_cast<float>(3 * (g % 7) + 3))) return "reduce-scatter wrong at " + std::to_string(i);
    }
    ncclCommDestroy(comm);
    device::streamDestroy(s);
    return "";
  }, 120);
  EXPECT_EQ(failures(results), "");
  EXPECT_EQ(device::simulatedUnalignedKernels() - before, 0u) << "reduce kernels launched off 16-byte boundaries";
}

// A stream of another GPU than the communicator's: the launch fails (CUDA refuses a
// kernel in a stream of another device), the call says so, and the communicator
// goes on: the abandoned job still finishes (nothing waits for it at destroy) and
// the next call on a right stream is exact.
TEST(ManyGpusErrors, AStreamOfAnotherGpuFailsTheCallAndTheCommunicatorGoesOn) {
  REQUIRE_GPU();
  if (device::gpuCount() < 2) GTEST_SKIP() << "needs 2 GPUs; " << device::gpuCount() << " visible";
  auto results = runRanks(Mode::kThreads, 1, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(1);
    auto other = static_cast<cudaStream_t>(device::streamCreate());
    device::setCurrentDevice(0);
    auto mine = static_cast<cudaStream_t>(device::streamCreate());
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    const size_t count = 4096;
    DeviceBuffer d(count * sizeof(float)), out(count * sizeof(float));
    std::vector<float> input = refInput(n, rank, count);
    uploadFloats(d.p, input);
    // Out of place: one rank's in-place all-reduce has nothing to enqueue (DeviceSelf).
    ncclResult_t r = ncclAllReduce(d.p, out.p, count, ncclFloat32, ncclSum, comm, other);
    std::string why = ncclGetLastError(comm);
    if (r == ncclSuccess) return "an all-reduce on another GPU's stream succeeded";
    if (why.empty()) return "no message for the failed call";
    RANK_NCCL(ncclAllReduce(d.p, d.p, count, ncclFloat32, ncclSum, comm, mine));
    device::streamSynchronize(mine);
    std::vector<float> got = downloadFloats(d.p, count);
    auto start = std::chrono::steady_clock::now();
    ncclCommDestroy(comm);
    double destroySec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    device::streamDestroy(mine);
    device::setCurrentDevice(1);
    device::streamDestroy(other);
    if (destroySec > 2) return "ncclCommDestroy waited " + std::to_string(destroySec) + " s for the abandoned job";
    return compareFloats(got, input, "one rank's all-reduce in place");
  }, 120);
  EXPECT_EQ(failures(results), "");
}

// A graph captured in global mode (PyTorch's default) by another thread while ranks
// run collectives on device buffers: Strata's allocations, frees and synchronous
// copies are made in relaxed capture mode, so none fails and the capture survives.
TEST(GpuCapture, AnotherThreadsGlobalCaptureSurvivesTheCollectives) {
  REQUIRE_GPU();
  device::setCurrentDevice(0);
  void* captured = device::streamCreate();
  bool began = simulated() && device::simulateCapture(captured, true);
#ifdef STRATA_TEST_CUDA
  if (!simulated())
    began = cudaStreamBeginCapture(static_cast<cudaStream_t>(captured), cudaStreamCaptureModeGlobal) == cudaSuccess;
#endif
  ASSERT_TRUE(began);
  auto results = runRanks(Mode::kThreads, 2, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    device::setCurrentDevice(0);
    Rank r{nullptr, device::streamCreate(), rank, n};
    RANK_NCCL(ncclCommInitRank(&r.comm, n, id, rank));
    std::string err = checkLarge(r);
    ncclCommDestroy(r.comm);
    device::streamDestroy(r.stream);
    return err;
  }, 600);
  bool intact = simulated() && device::simulateCapture(captured, false);
#ifdef STRATA_TEST_CUDA
  if (!simulated()) {
    cudaGraph_t g = nullptr;
    intact = cudaStreamEndCapture(static_cast<cudaStream_t>(captured), &g) == cudaSuccess && g;
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
  }
#endif
  device::streamDestroy(captured);
  EXPECT_EQ(failures(results), "");
  EXPECT_TRUE(intact) << "a call made while the other thread captured invalidated its capture";
}

}  // namespace
}  // namespace strata::test
