// The drop-in client as a CUDA translation unit, compiled by nvcc: NCCL clients
// such as nccl-tests are .cu files that take half and friends from nccl.h.
#include "dropin_client.cc"

// Device code beside the host code, as in such clients (compiled, never launched here).
__global__ void scaleHalf(half* data, int n, half by) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = __hmul(data[i], by);
}
