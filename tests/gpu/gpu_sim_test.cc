// The simulated GPUs' own properties (STRATA_GPU_SIM; part of gpu_test): host
// callbacks on one thread with no CUDA calls inside them, and streams sharing
// CUDA_DEVICE_MAX_CONNECTIONS hardware queues. The cases that must abort run in an
// exec'd copy of this binary (a helper test that skips unless asked).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device/gpu.h"
#include "gpu/gpu_util.h"

namespace strata::test {
namespace {

// Runs the helper test GpuSimulator.`name` in a fresh copy of this binary with `env`
// set; returns its wait status (-1 when it could not be started), its stderr in *err.
int runHelper(const char* name, const std::vector<std::pair<const char*, const char*>>& env, std::string* err) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::string filter = std::string("--gtest_filter=GpuSimulator.") + name;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    for (const auto& [k, v] : env) setenv(k, v, 1);
    execl("/proc/self/exe", "gpu_test", filter.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  char buf[512];
  for (ssize_t k; (k = read(fds[0], buf, sizeof buf)) > 0;) err->append(buf, static_cast<size_t>(k));
  close(fds[0]);
  int status = 0;
  return waitpid(pid, &status, 0) == pid ? status : -1;
}

// The simulated GPUs run host callbacks as CUDA does: every stream's on one thread
// (not a stream's own), in the order the streams reach them.
TEST(GpuSimulator, HostCallbacksOfEveryStreamRunOnOneThread) {
  if (!simulated()) GTEST_SKIP() << "a property of the simulated GPUs";
  device::setCurrentDevice(0);
  void* a = device::streamCreate();
  void* b = device::streamCreate();
  struct Seen {
    std::mutex mu;
    std::vector<pthread_t> threads;
  } seen;
  auto record = [](void* arg) {
    auto* s = static_cast<Seen*>(arg);
    std::lock_guard<std::mutex> lock(s->mu);
    s->threads.push_back(pthread_self());
  };
  for (int i = 0; i < 4; ++i) {
    device::hostCallback(a, record, &seen);
    device::hostCallback(b, record, &seen);
  }
  device::streamSynchronize(a);
  device::streamSynchronize(b);
  device::streamDestroy(a);
  device::streamDestroy(b);
  ASSERT_EQ(seen.threads.size(), 8u);
  for (pthread_t t : seen.threads) EXPECT_TRUE(pthread_equal(t, seen.threads[0]));
  EXPECT_FALSE(pthread_equal(seen.threads[0], pthread_self()));
}

// The process GpuSimulator.ACudaCallInsideAHostCallbackAborts starts: a callback
// that frees device memory, which CUDA forbids.
TEST(GpuSimulator, CallbackHelper) {
  if (!getenv("STRATA_TEST_CALLBACK_HELPER")) GTEST_SKIP() << "the process of ACudaCallInsideAHostCallbackAborts";
  device::setCurrentDevice(0);
  void* s = device::streamCreate();
  static void* p = device::gpuAlloc(4096);
  device::hostCallback(s, [](void*) { device::gpuFree(p); }, nullptr);
  device::streamSynchronize(s);
  _exit(0);  // not reached in strict mode
}

TEST(GpuSimulator, ACudaCallInsideAHostCallbackAbortsInStrictMode) {
  if (!simulated()) GTEST_SKIP() << "a property of the simulated GPUs";
  std::string out;
  int status = runHelper("CallbackHelper", {{"STRATA_TEST_CALLBACK_HELPER", "1"}, {"STRATA_GPU_SIM_STRICT", "1"}}, &out);
  ASSERT_GE(status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) << "status " << status << ": " << out;
  EXPECT_NE(out.find("cudaFree inside a host callback"), std::string::npos) << out;
}

// Stream a waits (a flag-wait kernel, then a copy that follows it); stream b's later
// callback raises the flag. On separate hardware queues that completes; on one
// (CUDA_DEVICE_MAX_CONNECTIONS=1) b's callback queues behind a's copy, which cannot
// start: a deadlock on a GPU, which the simulation reports by aborting after 10 s.
void waitAcrossStreams() {
  device::setCurrentDevice(0);
  void* a = device::streamCreate();
  void* b = device::streamCreate();
  static uint64_t flag = 0;
  static char src[64], dst[64];
  flag = 0;
  device::waitHostFlag(a, &flag, 1);
  device::copyAsync(dst, src, sizeof src, a);
  device::hostCallback(b, [](void*) { __atomic_store_n(&flag, uint64_t{1}, __ATOMIC_RELEASE); }, nullptr);
  device::streamSynchronize(a);
  device::streamSynchronize(b);
  device::streamDestroy(a);
  device::streamDestroy(b);
}

TEST(GpuSimulator, StreamsOnSeparateHardwareQueuesDoNotWaitForEachOther) {
  if (!simulated()) GTEST_SKIP() << "a property of the simulated GPUs";
  if (getenv("CUDA_DEVICE_MAX_CONNECTIONS")) GTEST_SKIP() << "needs CUDA's default of 8 hardware queues";
  waitAcrossStreams();
}

// The process StreamsSharingOneHardwareQueueDeadlockAsOnAGpu starts.
TEST(GpuSimulator, QueueHelper) {
  if (!getenv("STRATA_TEST_QUEUE_HELPER")) GTEST_SKIP() << "the process of StreamsSharingOneHardwareQueue...";
  waitAcrossStreams();
  _exit(0);  // not reached: the simulation aborts
}

TEST(GpuSimulator, StreamsSharingOneHardwareQueueDeadlockAsOnAGpu) {
  if (!simulated()) GTEST_SKIP() << "a property of the simulated GPUs";
  std::string out;
  int status = runHelper("QueueHelper", {{"STRATA_TEST_QUEUE_HELPER", "1"}, {"CUDA_DEVICE_MAX_CONNECTIONS", "1"}}, &out);
  ASSERT_GE(status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) << "status " << status << ": " << out;
  EXPECT_NE(out.find("CUDA_DEVICE_MAX_CONNECTIONS=1"), std::string::npos) << out;
}

// CUDA lets an event be destroyed while streams still have to reach its record or
// its wait: the order it set up holds (the simulation once freed it at once, and
// the stream work then read freed memory).
TEST(GpuSimulator, AnEventDestroyedBeforeItsStreamsReachItStillOrdersThem) {
  if (!simulated()) GTEST_SKIP() << "a property of the simulated GPUs";
  device::setCurrentDevice(0);
  void* a = device::streamCreate();
  void* b = device::streamCreate();
  const size_t bytes = 64 << 20;
  DeviceBuffer src(bytes), dst(bytes), tail(4);
  device::memsetSync(src.p, 0x11, bytes);
  device::memsetSync(dst.p, 0, bytes);
  device::memsetSync(tail.p, 0, 4);
  void* e = device::eventCreate();
  device::gpuCopy(dst.p, src.p, bytes, a);  // long enough that b gets to its wait first
  device::eventRecord(e, a);
  device::streamWaitEvent(b, e);
  device::eventDestroy(e);
  device::gpuCopy(tail.p, dst.at(bytes - 4), 4, b);  // ordered after a's copy
  device::streamSynchronize(b);
  device::streamSynchronize(a);
  uint32_t got = 0;
  device::copySync(&got, tail.p, 4);
  EXPECT_EQ(got, 0x11111111u);
  device::streamDestroy(a);
  device::streamDestroy(b);
}

}  // namespace
}  // namespace strata::test
