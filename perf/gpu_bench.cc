// gpu_bench: device-to-device copy bandwidth (cudaMemcpyAsync) against Strata's
// copy and reduce kernels, counting bytes read plus bytes written. Prints one line
// per kernel and type and the ratio to the copy; exits 1 without a GPU.
// Usage: gpu_bench [MiB per buffer, default 256] [iterations, default 20]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "device/dtypes.h"
#include "device/gpu.h"

using namespace strata;

namespace {

#define CHECK(call)                                                                 \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                        \
      fprintf(stderr, "gpu_bench: %s: %s\n", #call, cudaGetErrorString(e_));       \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

// Median of `iters` timed runs of fn, in seconds.
template <typename F>
double medianSeconds(int iters, F fn) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  fn();  // warm up
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    CHECK(cudaEventRecord(a));
    fn();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / 1e3);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], nullptr, 10) : 256;
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  if (device::gpuCount() == 0) {
    fprintf(stderr, "gpu_bench: %s\n", device::gpuUnavailableReason().c_str());
    return 1;
  }
  size_t bytes = mib << 20;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  void *a, *b, *c;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMalloc(&c, bytes));
  CHECK(cudaMemset(a, 0, bytes));
  CHECK(cudaMemset(b, 0, bytes));
  printf("# gpu_bench on %s, %zu MiB buffers, median of %d\n", prop.name, mib, iters);
  double copy = 2.0 * bytes / medianSeconds(iters, [&] { CHECK(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice)); });
  printf("%-28s %8.1f GB/s  (read + written)\n", "cudaMemcpy D2D", copy / 1e9);
  double mine = 2.0 * bytes / medianSeconds(iters, [&] { device::gpuCopy(c, a, bytes, nullptr); });
  printf("%-28s %8.1f GB/s  %5.1f%% of D2D\n", "gpuCopy", mine / 1e9, 100 * mine / copy);
  bool met = true;
  for (ncclDataType_t t : {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclInt32, ncclFloat64}) {
    size_t count = bytes / device::dtypeSize(t);
    const void* in[2] = {a, b};
    device::ReduceOp sum;
    double bw = 3.0 * bytes / medianSeconds(iters, [&] { device::gpuReduceInOrder(c, in, 2, count, t, sum, nullptr); });
    char name[64];
    snprintf(name, sizeof name, "reduce sum 2 inputs %s", device::dtypeName(t));
    printf("%-28s %8.1f GB/s  %5.1f%% of D2D\n", name, bw / 1e9, 100 * bw / copy);
    met = met && bw >= 0.85 * copy;
  }
  printf("# target: every reduce >= 85%% of D2D: %s\n", met ? "met" : "NOT met");
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 0;
}
