// kernelPipe: launches the pipelined collective kernel for the operation's type. The
// kernel's instantiations live in gpu_kernel_pipe_{float,half,int,e4m3,e5m2}.cu.
#include <cuda_runtime.h>

#include "device/gpu_format.cuh"
#include "device/gpu_kernels.h"

namespace strata::device::cuda {

template <typename T>
void launchPipe(const KernelPipe& k, void* stream);  // gpu_kernel_pipe.cuh, instantiated per type

void kernelPipe(const KernelPipe& k, void* stream) {
  withDevType(k.type, [&](auto tag) { launchPipe<decltype(tag)>(k, stream); });
  checkCuda(cudaGetLastError(), "pipelined collective kernel launch");
}

}  // namespace strata::device::cuda
