// What the GPU tests share: whether a GPU (real or simulated) is there, asked
// without initialising CUDA in a parent that forks ranks, and device buffers.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/gpu.h"
#include "nccl.h"
#include "verify/reference.h"

namespace strata::test {

// Asks `question` in a child process: CUDA must not be initialised in a parent
// that forks ranks.
inline std::string askChild(const std::function<std::string()>& question) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    std::string r = question();
    (void)!write(fds[1], r.data(), r.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[256];
  ssize_t k = read(fds[0], buf, sizeof buf);
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return std::string(buf, k > 0 ? static_cast<size_t>(k) : 0);
}

// Why no GPU is usable here ("" when one is).
inline const std::string& noGpuReason() {
  static std::string why = askChild([] {
    std::string r = device::gpuCount() > 0 ? "" : device::gpuUnavailableReason();
    return r.empty() && device::gpuCount() == 0 ? std::string("no GPU") : r;
  });
  return why;
}

// GPUs visible (real or simulated).
inline int gpusVisible() {
  static int n = atoi(askChild([] { return std::to_string(device::gpuCount()); }).c_str());
  return n;
}

inline bool simulated() { return getenv("STRATA_GPU_SIM") && atoi(getenv("STRATA_GPU_SIM")) > 0; }

#define REQUIRE_GPU() \
  if (!noGpuReason().empty()) GTEST_SKIP() << "no GPU: " << noGpuReason()

#define REQUIRE_GPUS(n)                                                                                 \
  REQUIRE_GPU();                                                                                        \
  if (gpusVisible() < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs; " << gpusVisible() << " visible"

// A rank on GPU rank % GPUs, with a stream and a communicator, running `body`
// (destroyed after it, aborted when it failed); "" or "rank r: " and what failed.
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

// Device buffers the test owns.
// Through ncclMemAlloc / ncclMemFree: with ranks sharing a GPU in one process, a
// plain cudaFree between collectives would wait for another rank's stream held
// until this thread's next call (a deadlock on a GPU; the simulated one aborts);
// Strata's free keeps the memory while its device work is in flight.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t b) : bytes(b) {
    if (ncclMemAlloc(&p, b) != ncclSuccess) throw std::runtime_error(std::string("ncclMemAlloc: ") + ncclGetLastError(nullptr));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;  // it owns its memory: a copy would free it twice
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p) ncclMemFree(p);
  }
  char* at(size_t offset) const { return static_cast<char*>(p) + offset; }
};

// Captures `group` (enqueueing on `stream`) into a graph; null with *err saying
// why when the library refused the capture or CUDA could not make the graph.
inline void* captureGroup(void* stream, ncclComm_t comm, const std::function<bool()>& group, std::string* err) {
  std::string why;
  device::graphBegin(stream);
  bool captured = group();
  void* graph = device::graphEnd(stream, &why);
  if (!captured) *err = std::string("capture refused: ") + ncclGetLastError(comm);
  else if (!graph) *err = "capture failed: " + why;
  if (captured) return graph;
  if (graph) device::graphDestroy(graph);
  return nullptr;
}

inline void upload(void* dst, const std::vector<char>& host) { device::copySync(dst, host.data(), host.size()); }
inline std::vector<char> download(const void* src, size_t bytes) {
  std::vector<char> host(bytes);
  device::copySync(host.data(), src, bytes);
  return host;
}

// Float reference data (verify/reference.h) for the tests that move float32: rank
// `rank` of `n`'s input to a sum at positions [first, first + count), the exact sum of
// the n ranks' inputs, and the values of a moved piece tagged `tag`.
inline std::vector<float> refInput(int n, int rank, size_t count, size_t first = 0) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(verify::inputValue(n, rank, first + i, ncclFloat32, verify::TestOp::kSum));
  return v;
}
inline std::vector<float> refSum(int n, size_t count, size_t first = 0) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(verify::reducedValue(n, first + i, ncclFloat32, verify::TestOp::kSum));
  return v;
}
inline std::vector<float> refMoved(int tag, size_t count, size_t first = 0) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(verify::movedValue(tag, first + i, ncclFloat32));
  return v;
}
inline void uploadFloats(void* dst, const std::vector<float>& v) { device::copySync(dst, v.data(), v.size() * sizeof(float)); }
inline std::vector<float> downloadFloats(const void* p, size_t count) {
  std::vector<float> v(count);
  device::copySync(v.data(), p, count * sizeof(float));
  return v;
}
// "" when equal bit for bit, else the first difference as "<what>: element i is x, expected y".
inline std::string compareFloats(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  if (got.size() != want.size()) return what + ": " + std::to_string(got.size()) + " elements, expected " + std::to_string(want.size());
  return verify::compareBuffers(ncclFloat32, got.data(), want.data(), got.size(), what);
}
// The pieces one after another (an all-gather's or all-to-all's expected output).
inline std::vector<float> concat(const std::vector<std::vector<float>>& pieces) {
  std::vector<float> all;
  for (const auto& p : pieces) all.insert(all.end(), p.begin(), p.end());
  return all;
}

}  // namespace strata::test
