#include "harness/perf_device.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef STRATA_PERF_CUDA
#include <cuda_runtime.h>
#endif

namespace strata::perf {
namespace {

int simulatedGpus() {
  const char* v = getenv("STRATA_GPU_SIM");
  return v ? atoi(v) : 0;
}

#ifdef STRATA_PERF_CUDA
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "perf: %s failed: %s\n", what, cudaGetErrorString(e));
  exit(1);
}
#endif

}  // namespace

int gpuCount() {
  if (int n = simulatedGpus(); n > 0) return n;
#ifdef STRATA_PERF_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;  // no driver: host memory
  return n;
#else
  return 0;
#endif
}

void setDevice(int device) {
  if (simulatedGpus() > 0 || device < 0) return;
#ifdef STRATA_PERF_CUDA
  check(cudaSetDevice(device), "cudaSetDevice");
#endif
}

void* streamCreate() {
  if (simulatedGpus() > 0) return new char;  // a handle of its own: the simulator makes the stream on first use
#ifdef STRATA_PERF_CUDA
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
#else
  return nullptr;
#endif
}

void streamDestroy(void* stream) {
  if (simulatedGpus() > 0) return void(delete static_cast<char*>(stream));
#ifdef STRATA_PERF_CUDA
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
#else
  (void)stream;
#endif
}

void copyToDevice(void* dst, const void* src, size_t bytes) {
  if (simulatedGpus() > 0) return void(memcpy(dst, src, bytes));
#ifdef STRATA_PERF_CUDA
  // From pageable memory cudaMemcpy may return before the data lands, and the
  // ranks' streams do not wait for the legacy stream (they are non-blocking).
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
#endif
}

void copyToHost(void* dst, const void* src, size_t bytes) {
  if (simulatedGpus() > 0) return void(memcpy(dst, src, bytes));
#ifdef STRATA_PERF_CUDA
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
#endif
}

void clearDevice(void* dst, size_t bytes) {
  if (simulatedGpus() > 0) return void(memset(dst, 0, bytes));
#ifdef STRATA_PERF_CUDA
  // cudaMemset on device memory returns before it is done: a collective on a
  // rank's (non-blocking) stream raced it (1 rank on an H200: 14880 wrong values).
  check(cudaMemset(dst, 0, bytes), "cudaMemset");
  check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
#endif
}

void synchronize(const std::vector<ncclComm_t>& comms, const std::vector<void*>& streams) {
  if (simulatedGpus() > 0) {
    static thread_local int word[2];
    ncclGroupStart();
    for (ncclComm_t c : comms) ncclAllReduce(&word[0], &word[1], 1, ncclInt32, ncclSum, c, nullptr);
    ncclGroupEnd();
    return;
  }
#ifdef STRATA_PERF_CUDA
  for (void* s : streams) check(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), "cudaStreamSynchronize");
#else
  (void)streams;
#endif
}

}  // namespace strata::perf
