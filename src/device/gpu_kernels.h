// The CUDA kernels' launchers (gpu_kernels.cu), for the CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/cpu_reduce.h"
#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"
#include "device/kernel_pipe.h"

namespace strata::device::cuda {

void checkCuda(int err, const char* what);  // gpu_cuda.cc: throws ncclUnhandledCudaError
void reduceInOrder(void* const* outputs, int nOut, const void* const* inputs, int n, size_t count, ncclDataType_t type,
                   const ReduceOp& op, void* stream);
void prepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op, void* stream);
void copy(void* dst, const void* src, size_t bytes, void* stream);
void kernelP2p(const KernelP2p& k, void* stream);
constexpr int kPipeThreads = 512;  // threads of a pipelined kernel's block
void kernelPipe(const KernelPipe& k, void* stream);
int kernelBlocksAtOnce(int device);  // SMs x the fewest blocks per SM of any device-driven kernel
void waitHostFlag(void* stream, const uint64_t* flag, uint64_t value);

}  // namespace strata::device::cuda
