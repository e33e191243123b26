// The pipelined collective kernel for half and bfloat16 (gpu_kernel_pipe.cuh).
#include "device/gpu_kernel_pipe.cuh"

namespace strata::device::cuda {

template void launchPipe<__half>(const KernelPipe& k, void* stream);
template void launchPipe<__nv_bfloat16>(const KernelPipe& k, void* stream);

}  // namespace strata::device::cuda
