// The pipelined collective kernel for the integer types (gpu_kernel_pipe.cuh).
#include "device/gpu_kernel_pipe.cuh"

namespace strata::device::cuda {

template void launchPipe<int8_t>(const KernelPipe& k, void* stream);
template void launchPipe<uint8_t>(const KernelPipe& k, void* stream);
template void launchPipe<int32_t>(const KernelPipe& k, void* stream);
template void launchPipe<uint32_t>(const KernelPipe& k, void* stream);
template void launchPipe<int64_t>(const KernelPipe& k, void* stream);
template void launchPipe<uint64_t>(const KernelPipe& k, void* stream);

}  // namespace strata::device::cuda
