// The GPU path, on whatever GPU is visible (label "gpu"; every test skips, saying
// why, where none is). Kernels against the CPU functions bit for bit; every
// collective on device buffers through the C API, 1-4 ranks on one GPU, as
// threads and as processes, in place and out of place, checked exactly.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "device/cpu_reduce.h"
#include "device/dtypes.h"
#include "device/gpu.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "verify/reference.h"

namespace strata::test {
namespace {

using verify::TestOp;

// Asked in a child process: CUDA must not be initialised in a parent that forks ranks.
const std::string& noGpuReason() {
  static std::string why = [] {
    int fds[2];
    if (pipe(fds) != 0) return std::string("pipe failed");
    pid_t pid = fork();
    if (pid == 0) {
      int n = 0;
      cudaError_t e = cudaGetDeviceCount(&n);
      std::string r = e != cudaSuccess ? std::string("CUDA: ") + cudaGetErrorString(e) : n == 0 ? "no GPU visible" : "";
      (void)!write(fds[1], r.data(), r.size());
      _exit(0);
    }
    close(fds[1]);
    char buf[256];
    ssize_t k = read(fds[0], buf, sizeof buf);
    close(fds[0]);
    waitpid(pid, nullptr, 0);
    return std::string(buf, k > 0 ? static_cast<size_t>(k) : 0);
  }();
  return why;
}

#define REQUIRE_GPU() \
  if (!noGpuReason().empty()) GTEST_SKIP() << "no GPU: " << noGpuReason()

#define CUDA_OK(call)                                                                                       \
  do {                                                                                                      \
    cudaError_t e_ = (call);                                                                                \
    if (e_ != cudaSuccess) return std::string(#call) + " failed: " + cudaGetErrorString(e_);                \
  } while (0)

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
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  for (int t = 0; t < ncclNumTypes; ++t)
    for (TestOp op : verify::kAllOps)
      for (int n : {1, 2, 3, 9})
        for (size_t count : {size_t{1}, size_t{31}, size_t{4099}})
          for (size_t offset : {size_t{0}, size_t{1}}) {
            auto type = static_cast<ncclDataType_t>(t);
            size_t es = device::dtypeSize(type), bytes = (count + offset) * es;
            device::ReduceOp rop = reduceOpFor(op, n);
            std::vector<std::vector<char>> in;
            std::vector<const void*> hostIn, devIn;
            std::vector<void*> owned;
            for (int j = 0; j < n; ++j) {
              in.push_back(verify::makeBuffer(type, count + offset, [&](size_t i) { return verify::inputValue(j, i, type, op); }));
              void* d = nullptr;
              ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
              ASSERT_EQ(cudaMemcpy(d, in[j].data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
              owned.push_back(d);
              hostIn.push_back(in[j].data() + offset * es);
              devIn.push_back(static_cast<char*>(d) + offset * es);
            }
            std::vector<char> want(count * es), got(count * es);
            void* out = nullptr;
            ASSERT_EQ(cudaMalloc(&out, bytes), cudaSuccess);
            char* dst = static_cast<char*>(out) + offset * es;
            if (op == TestOp::kPreMulHost || op == TestOp::kPreMulDevice) {
              device::prepare(want.data(), hostIn[0], count, type, rop);
              device::gpuPrepare(dst, devIn[0], count, type, rop, nullptr);
            } else {
              device::reduceInOrder(want.data(), hostIn.data(), n, count, type, rop);
              device::gpuReduceInOrder(dst, devIn.data(), n, count, type, rop, nullptr);
            }
            ASSERT_EQ(cudaMemcpy(got.data(), dst, count * es, cudaMemcpyDeviceToHost), cudaSuccess);
            std::string what = std::string(device::dtypeName(type)) + " " + verify::opName(op) + " n=" +
                               std::to_string(n) + " count=" + std::to_string(count) + " offset=" + std::to_string(offset);
            EXPECT_EQ(verify::compareBuffers(type, got.data(), want.data(), count, what), "");
            for (void* d : owned) cudaFree(d);
            cudaFree(out);
          }
}

// One collective on device buffers: inputs copied in, the call on the rank's
// stream, a sync, outputs copied out and compared with the exact expectation.
struct DeviceCase {
  ncclComm_t comm;
  cudaStream_t stream;
  int rank, n;
};

std::string checkAllReduce(const DeviceCase& c, ncclDataType_t type, TestOp op, bool inPlace) {
  size_t count = 1031, es = device::dtypeSize(type);
  auto input = verify::makeBuffer(type, count, [&](size_t i) { return verify::inputValue(c.rank, i, type, op); });
  auto expected = verify::makeBuffer(type, count, [&](size_t i) { return verify::reducedValue(c.n, i, type, op); });
  ncclRedOp_t redop = ncclSum;
  switch (op) {
    case TestOp::kProd: redop = ncclProd; break;
    case TestOp::kMax: redop = ncclMax; break;
    case TestOp::kMin: redop = ncclMin; break;
    case TestOp::kAvg: redop = ncclAvg; break;
    default: break;
  }
  std::vector<char> scalar = verify::makeBuffer(type, 1, [](size_t) { return verify::kPreMulScalar; });
  if (op == TestOp::kPreMulHost) RANK_NCCL(ncclRedOpCreatePreMulSum(&redop, scalar.data(), type, ncclScalarHostImmediate, c.comm));
  void *in = nullptr, *out = nullptr;
  CUDA_OK(cudaMalloc(&in, count * es));
  CUDA_OK(cudaMalloc(&out, count * es));
  CUDA_OK(cudaMemcpy(in, input.data(), count * es, cudaMemcpyHostToDevice));
  void* dst = inPlace ? in : out;
  RANK_NCCL(ncclAllReduce(in, dst, count, type, redop, c.comm, c.stream));
  CUDA_OK(cudaStreamSynchronize(c.stream));
  std::vector<char> got(count * es);
  CUDA_OK(cudaMemcpy(got.data(), dst, count * es, cudaMemcpyDeviceToHost));
  if (op == TestOp::kPreMulHost) RANK_NCCL(ncclRedOpDestroy(redop, c.comm));
  cudaFree(in);
  cudaFree(out);
  return verify::compareBuffers(type, got.data(), expected.data(), count,
                                std::string("AllReduce ") + device::dtypeName(type) + " " + verify::opName(op));
}

// AllGather, ReduceScatter, Broadcast, Reduce, AllToAll and a send/recv ring, float.
std::string checkMovement(const DeviceCase& c, bool inPlace) {
  const size_t count = 777, es = sizeof(float), n = static_cast<size_t>(c.n);
  ncclDataType_t type = ncclFloat32;
  float *buf = nullptr, *out = nullptr;
  CUDA_OK(cudaMalloc(&buf, count * n * es));
  CUDA_OK(cudaMalloc(&out, count * n * es));
  auto upload = [&](float* d, size_t elems, const std::function<double(size_t)>& v) {
    auto h = verify::makeBuffer(type, elems, v);
    return cudaMemcpy(d, h.data(), elems * es, cudaMemcpyHostToDevice);
  };
  auto check = [&](const float* d, size_t elems, const std::function<double(size_t)>& v, const char* what) {
    auto want = verify::makeBuffer(type, elems, v);
    std::vector<char> got(elems * es);
    if (cudaMemcpy(got.data(), d, elems * es, cudaMemcpyDeviceToHost) != cudaSuccess) return std::string("copy out failed");
    return verify::compareBuffers(type, got.data(), want.data(), elems, what);
  };
  std::string err;
  auto mine = [&](size_t i) { return verify::movedValue(c.rank, i, type); };
  // AllGather: in place, the rank's block of the output is the input.
  float* agOut = inPlace ? buf : out;
  float* agIn = inPlace ? buf + c.rank * count : buf;
  CUDA_OK(upload(agIn, count, mine));
  RANK_NCCL(ncclAllGather(agIn, agOut, count, type, c.comm, c.stream));
  CUDA_OK(cudaStreamSynchronize(c.stream));
  if (!(err = check(agOut, count * n, [&](size_t i) { return verify::movedValue(i / count, i % count, type); }, "AllGather")).empty()) return err;
  // ReduceScatter (sum of small integers: exact).
  CUDA_OK(upload(buf, count * n, [&](size_t i) { return verify::inputValue(c.rank, i, type, TestOp::kSum); }));
  float* rsOut = inPlace ? buf + c.rank * count : out;
  RANK_NCCL(ncclReduceScatter(buf, rsOut, count, type, ncclSum, c.comm, c.stream));
  CUDA_OK(cudaStreamSynchronize(c.stream));
  if (!(err = check(rsOut, count, [&](size_t i) { return verify::reducedValue(c.n, c.rank * count + i, type, TestOp::kSum); }, "ReduceScatter")).empty()) return err;
  // Broadcast and Reduce from the last rank.
  int root = c.n - 1;
  CUDA_OK(upload(buf, count, [&](size_t i) { return c.rank == root ? verify::movedValue(root, i, type) : -1; }));
  RANK_NCCL(ncclBroadcast(buf, inPlace ? buf : out, count, type, root, c.comm, c.stream));
  CUDA_OK(cudaStreamSynchronize(c.stream));
  if (!(err = check(inPlace ? buf : out, count, [&](size_t i) { return verify::movedValue(root, i, type); }, "Broadcast")).empty()) return err;
  CUDA_OK(upload(buf, count, [&](size_t i) { return verify::inputValue(c.rank, i, type, TestOp::kSum); }));
  RANK_NCCL(ncclReduce(buf, inPlace ? buf : out, count, type, ncclSum, root, c.comm, c.stream));
  CUDA_OK(cudaStreamSynchronize(c.stream));
  if (c.rank == root &&
      !(err = check(inPlace ? buf : out, count, [&](size_t i) { return verify::reducedValue(c.n, i, type, TestOp::kSum); }, "Reduce")).empty())
    return err;
  // AllToAll (out of place only, as NCCL).
  CUDA_OK(upload(buf, count * n, [&](size_t i) { return verify::movedValue(c.rank * c.n + static_cast<int>(i / count), i % count, type); }));
  RANK_NCCL(ncclAlltoAll(buf, out, count, type, c.comm, c.stream));
  CUDA_OK(cudaStreamSynchronize(c.stream));
  if (!(err = check(out, count * n, [&](size_t i) { return verify::movedValue(static_cast<int>(i / count) * c.n + c.rank, i % count, type); }, "AllToAll")).empty()) return err;
  // Send to the next rank, receive from the previous, in one group.
  CUDA_OK(upload(buf, count, mine));
  int next = (c.rank + 1) % c.n, prev = (c.rank + c.n - 1) % c.n;
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclSend(buf, count, type, next, c.comm, c.stream));
  RANK_NCCL(ncclRecv(out, count, type, prev, c.comm, c.stream));
  RANK_NCCL(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(c.stream));
  if (!(err = check(out, count, [&](size_t i) { return verify::movedValue(prev, i, type); }, "SendRecv")).empty()) return err;
  cudaFree(buf);
  cudaFree(out);
  return "";
}

std::string deviceRank(int rank, int nranks, const ncclUniqueId& id) {
  CUDA_OK(cudaSetDevice(0));  // every rank on the one GPU: Strata allows it, NCCL does not
  DeviceCase c{nullptr, nullptr, rank, nranks};
  CUDA_OK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  RANK_NCCL(ncclCommInitRank(&c.comm, nranks, id, rank));
  int dev = -1;
  RANK_NCCL(ncclCommCuDevice(c.comm, &dev));
  if (dev != 0) return "ncclCommCuDevice says " + std::to_string(dev) + ", expected 0";
  std::string err;
  for (bool inPlace : {false, true}) {
    for (int t = 0; t < ncclNumTypes && err.empty(); ++t)
      for (TestOp op : {TestOp::kSum, TestOp::kProd, TestOp::kMax, TestOp::kMin, TestOp::kAvg, TestOp::kPreMulHost})
        if (err.empty()) err = checkAllReduce(c, static_cast<ncclDataType_t>(t), op, inPlace);
    if (err.empty()) err = checkMovement(c, inPlace);
  }
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(c.comm, &async);
  if (err.empty() && async != ncclSuccess) err = "async error " + std::to_string(async);
  ncclCommDestroy(c.comm);
  cudaStreamDestroy(c.stream);
  return err.empty() ? "" : "rank " + std::to_string(rank) + ": " + err;
}

class GpuCollectives : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(GpuCollectives, ExactResultsOnDeviceBuffers) {
  REQUIRE_GPU();
  auto [mode, n] = GetParam();
  EXPECT_EQ(failures(runRanks(mode, n, deviceRank, 300)), "");
}

INSTANTIATE_TEST_SUITE_P(OneGpu, GpuCollectives,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses), ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::string(modeName(std::get<0>(info.param))) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Stream order: the call returns before the stream has run it, and work enqueued
// after it sees the result; a captured stream is refused with a clear error.
TEST(GpuStreams, EnqueuedInOrderAndCaptureRefused) {
  REQUIRE_GPU();
  auto results = runRanks(Mode::kThreads, 1, [](int, int, const ncclUniqueId& id) -> std::string {
    CUDA_OK(cudaSetDevice(0));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, 1, id, 0));
    const size_t count = 1 << 20;
    float* d = nullptr;
    CUDA_OK(cudaMalloc(&d, count * sizeof(float)));
    std::vector<float> ones(count, 1.0f), got(count);
    CUDA_OK(cudaMemcpyAsync(d, ones.data(), count * sizeof(float), cudaMemcpyHostToDevice, s));
    for (int i = 0; i < 5; ++i) RANK_NCCL(ncclAllReduce(d, d, count, ncclFloat32, ncclSum, comm, s));
    CUDA_OK(cudaMemcpyAsync(got.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    if (got[0] != 1.0f || got[count - 1] != 1.0f) return "one rank's all-reduce changed the data";
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    ncclResult_t r = ncclAllReduce(d, d, count, ncclFloat32, ncclSum, comm, s);
    cudaGraph_t g;
    cudaStreamEndCapture(s, &g);
    if (r != ncclInvalidUsage) return "capture was not refused (" + std::to_string(r) + ")";
    if (std::string(ncclGetLastError(comm)).find("CUDA graph") == std::string::npos)
      return std::string("unclear error: ") + ncclGetLastError(comm);
    ncclCommDestroy(comm);
    cudaFree(d);
    cudaStreamDestroy(s);
    return "";
  });
  EXPECT_EQ(failures(results), "");
}

}  // namespace
}  // namespace strata::test
